//! A rendered screen as text and as HTML, for the snapshot tests and the screenshots in `docs/`
//! (`docs/tui.txt`, and `docs/tui.html`, which keeps the colours and which a browser turns into
//! `docs/tui.png`).

use ratatui::buffer::Buffer;
use ratatui::style::{Color, Modifier};

/// The text of a rendered buffer: one line per row, trailing spaces removed, styles dropped.
pub fn buffer_text(buf: &Buffer) -> String {
    let mut out = String::new();
    for y in buf.area.top()..buf.area.bottom() {
        let mut line = String::new();
        for x in buf.area.left()..buf.area.right() {
            line.push_str(buf[(x, y)].symbol());
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

/// A CSS colour for a terminal colour (a dark theme; `None`: the default).
fn css(c: Color) -> Option<String> {
    Some(match c {
        Color::Reset => return None,
        Color::Black => "#1e1e1e".into(),
        Color::Red => "#f14c4c".into(),
        Color::Green => "#23d18b".into(),
        Color::Yellow => "#e5e510".into(),
        Color::Blue => "#3b8eea".into(),
        Color::Magenta => "#d670d6".into(),
        Color::Cyan => "#29b8db".into(),
        Color::Gray => "#cccccc".into(),
        Color::DarkGray => "#808080".into(),
        Color::LightRed => "#ff7b7b".into(),
        Color::LightGreen => "#7bff9b".into(),
        Color::LightYellow => "#ffff7b".into(),
        Color::LightBlue => "#7bb8ff".into(),
        Color::LightMagenta => "#ff7bff".into(),
        Color::LightCyan => "#7bffff".into(),
        Color::White => "#ffffff".into(),
        Color::Rgb(r, g, b) => format!("#{r:02x}{g:02x}{b:02x}"),
        Color::Indexed(i) => return css(Color::from_u32(u32::from(i))),
    })
}

/// Escapes HTML; braille cells (the charts' dots) each get a one-cell box, as monospace fonts
/// lack them and the fallback font's glyphs are wider than a cell.
fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '\u{2800}'..='\u{28ff}' => {
                out.push_str("<i>");
                out.push(c);
                out.push_str("</i>");
            }
            c => out.push(c),
        }
    }
    out
}

/// A self-contained HTML page showing the buffer with its colours (runs of equally styled
/// cells become one `<span>`).
pub fn buffer_html(buf: &Buffer, title: &str) -> String {
    let mut body = String::new();
    for y in buf.area.top()..buf.area.bottom() {
        let mut run = String::new();
        let mut style = String::new();
        let flush = |run: &mut String, style: &str, body: &mut String| {
            if run.is_empty() {
                return;
            }
            if style.is_empty() {
                body.push_str(&escape(run));
            } else {
                body.push_str(&format!("<span style=\"{style}\">{}</span>", escape(run)));
            }
            run.clear();
        };
        for x in buf.area.left()..buf.area.right() {
            let cell = &buf[(x, y)];
            let mut st = String::new();
            if let Some(c) = css(cell.fg) {
                st.push_str(&format!("color:{c};"));
            }
            if let Some(c) = css(cell.bg) {
                st.push_str(&format!("background:{c};"));
            }
            if cell.modifier.contains(Modifier::BOLD) {
                st.push_str("font-weight:bold;");
            }
            if st != style {
                flush(&mut run, &style, &mut body);
                style = st;
            }
            run.push_str(cell.symbol());
        }
        flush(&mut run, &style, &mut body);
        body.push('\n');
    }
    format!(
        "<!doctype html>\n<html><head><meta charset=\"utf-8\"><title>{}</title><style>\
         body{{margin:0;background:#1e1e1e}}\
         pre{{margin:0;padding:12px;color:#cccccc;background:#1e1e1e;\
         font:14px/1.1 'DejaVu Sans Mono',monospace}}\
         i{{display:inline-block;width:1ch;overflow:hidden;font-style:normal;vertical-align:top}}\
         </style></head>\n<body><pre>{body}</pre></body></html>\n",
        escape(title)
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use ratatui::layout::Rect;
    use ratatui::style::Style;

    #[test]
    fn text_and_html_keep_the_cells() {
        let mut buf = Buffer::empty(Rect::new(0, 0, 6, 3));
        buf.set_string(0, 0, "a<b", Style::new().fg(Color::Red));
        buf.set_string(0, 1, "ok", Style::new().add_modifier(Modifier::BOLD));
        buf.set_string(1, 2, "⣀", Style::new());
        assert_eq!(buffer_text(&buf), "a<b\nok\n ⣀\n");
        let html = buffer_html(&buf, "t");
        assert!(html.contains("<i>⣀</i>"), "{html}");
        assert!(html.contains("<span style=\"color:#f14c4c;\">a&lt;b</span>   \n"));
        assert!(html.contains("<span style=\"font-weight:bold;\">ok</span>    \n"));
    }
}
