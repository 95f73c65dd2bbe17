//! Tests that keep the documents true to the code they describe:
//! - `docs/ARCHITECTURE.md` names every crate of the workspace (and the separate `fuzz/`
//!   workspace) and only crates that exist, and names every URL scheme the registry has a
//!   driver for and no other;
//! - every relative link in `README.md` and `docs/*.md` leads to a file that exists, and a link
//!   to a heading of a Markdown file (`GUIDE.md#secrets`, `#performance`) to a heading that
//!   exists.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn read(rel: &str) -> String {
    let path = root().join(rel);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The lines of a Markdown text outside fenced code blocks, with their line numbers (from 1).
fn prose_lines(md: &str) -> Vec<(usize, &str)> {
    let mut fenced = false;
    let mut out = Vec::new();
    for (i, line) in md.lines().enumerate() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if !fenced {
            out.push((i + 1, line));
        }
    }
    out
}

/// Inline code spans (`` `...` ``) of a Markdown text, outside fenced code blocks.
fn code_spans(md: &str) -> Vec<&str> {
    let mut spans = Vec::new();
    for (_, line) in prose_lines(md) {
        let mut parts = line.split('`');
        parts.next(); // text before the first backtick
        while let (Some(code), Some(_text)) = (parts.next(), parts.next()) {
            spans.push(code);
        }
    }
    spans
}

fn is_name_char(c: char) -> bool {
    c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '_'
}

/// The crate folders a text names: every `crates/NAME` and `crates/drivers/NAME` in it (the
/// folder `crates/drivers` itself is not a crate), and `fuzz/` for the cargo-fuzz workspace.
fn crate_paths(text: &str) -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    let mut rest = text;
    while let Some(at) = rest.find("crates/") {
        let before = rest[..at].chars().next_back();
        rest = &rest[at + "crates/".len()..];
        if before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '/' || c == '_') {
            continue; // part of another path or word
        }
        let first: String = rest.chars().take_while(|&c| is_name_char(c)).collect();
        if first.is_empty() {
            continue;
        }
        if first == "drivers" {
            let after = &rest["drivers".len()..];
            let Some(after) = after.strip_prefix('/') else {
                continue;
            };
            let second: String = after.chars().take_while(|&c| is_name_char(c)).collect();
            if !second.is_empty() {
                found.insert(format!("crates/drivers/{second}"));
            }
        } else {
            found.insert(format!("crates/{first}"));
        }
    }
    found
}

/// The schemes of the URLs a text quotes in code spans: `nats://`, `amqp10s://host:5671`, or a
/// URL inside a longer span (`--consume-from ws://127.0.0.1:8080`).
fn quoted_schemes(md: &str) -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    for span in code_spans(md) {
        let mut rest = span;
        while let Some(at) = rest.find("://") {
            let scheme: String = rest[..at]
                .chars()
                .rev()
                .take_while(|&c| c.is_ascii_alphanumeric() || c == '+' || c == '.' || c == '-')
                .collect::<Vec<_>>()
                .into_iter()
                .rev()
                .collect();
            if !scheme.is_empty() {
                found.insert(scheme);
            }
            rest = &rest[at + 3..];
        }
    }
    found
}

fn workspace_lists() -> (Vec<String>, Vec<String>) {
    let manifest: toml::Table = read("Cargo.toml").parse().expect("Cargo.toml parses");
    let ws = manifest["workspace"].as_table().expect("[workspace]");
    let list = |key: &str| -> Vec<String> {
        ws.get(key)
            .and_then(|v| v.as_array())
            .map(|a| {
                a.iter()
                    .map(|v| {
                        v.as_str()
                            .expect("a path")
                            .trim_end_matches('/')
                            .to_string()
                    })
                    .collect()
            })
            .unwrap_or_default()
    };
    (list("members"), list("exclude"))
}

#[test]
fn architecture_names_every_crate_and_only_crates() {
    let arch = read("docs/ARCHITECTURE.md");
    let named = crate_paths(&arch);
    for path in &named {
        assert!(
            root().join(path).join("Cargo.toml").is_file(),
            "docs/ARCHITECTURE.md names `{path}`, which has no Cargo.toml"
        );
    }
    let (members, excluded) = workspace_lists();
    assert!(!members.is_empty(), "no workspace members in Cargo.toml");
    for member in &members {
        assert!(
            named.contains(member),
            "workspace member `{member}` is missing from docs/ARCHITECTURE.md's crate map"
        );
    }
    // Workspaces of their own (the cargo-fuzz crate) are part of the map too.
    for other in &excluded {
        assert!(
            root().join(other).join("Cargo.toml").is_file(),
            "Cargo.toml excludes `{other}`, which has no Cargo.toml"
        );
        assert!(
            arch.contains(&format!("`{other}/`")),
            "`{other}/` (a workspace of its own) is missing from docs/ARCHITECTURE.md"
        );
    }
}

#[test]
fn architecture_names_every_scheme_and_only_schemes() {
    let arch = read("docs/ARCHITECTURE.md");
    let named = quoted_schemes(&arch);
    let known: BTreeSet<String> = crate::registry::all_schemes()
        .into_iter()
        .map(String::from)
        .collect();
    let unknown: Vec<_> = named.difference(&known).collect();
    assert!(
        unknown.is_empty(),
        "docs/ARCHITECTURE.md names schemes no driver answers to: {unknown:?} (known: {known:?})"
    );
    let missing: Vec<_> = known.difference(&named).collect();
    assert!(
        missing.is_empty(),
        "docs/ARCHITECTURE.md does not name these schemes of src/registry.rs (as `SCHEME://`): {missing:?}"
    );
}

/// GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens.
fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|&c| c.is_alphanumeric() || c == ' ' || c == '-' || c == '_')
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

/// The anchors of a Markdown file's headings (`-1`, `-2`... for repeated ones, as GitHub does).
fn anchors(md: &str) -> BTreeSet<String> {
    let mut seen = BTreeSet::new();
    for (_, line) in prose_lines(md) {
        let text = line.trim_start_matches('#');
        if text.len() == line.len() || !text.starts_with(' ') {
            continue;
        }
        let base = slug(text);
        let mut anchor = base.clone();
        let mut n = 0;
        while seen.contains(&anchor) {
            n += 1;
            anchor = format!("{base}-{n}");
        }
        seen.insert(anchor);
    }
    seen
}

/// The targets of a Markdown text's inline links and images (`[text](target)`), with their
/// line numbers.
fn link_targets(md: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    for (n, line) in prose_lines(md) {
        let mut rest = line;
        while let Some(at) = rest.find("](") {
            rest = &rest[at + 2..];
            let Some(end) = rest.find(')') else { break };
            // `[text](target "title")`: the target is the first word.
            let target = rest[..end].split_whitespace().next().unwrap_or("");
            out.push((n, target.to_string()));
            rest = &rest[end..];
        }
    }
    out
}

fn documents() -> Vec<PathBuf> {
    let mut docs = vec![root().join("README.md")];
    let mut more: Vec<PathBuf> = std::fs::read_dir(root().join("docs"))
        .expect("docs/")
        .map(|e| e.expect("docs/ entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "md"))
        .collect();
    more.sort();
    docs.extend(more);
    docs
}

#[test]
fn local_links_lead_somewhere() {
    let mut broken = Vec::new();
    let docs = documents();
    assert!(
        docs.iter().any(|d| d.ends_with("docs/ARCHITECTURE.md")),
        "docs/ARCHITECTURE.md is missing"
    );
    for doc in &docs {
        let text = std::fs::read_to_string(doc).expect("a document");
        let dir = doc.parent().expect("a folder");
        let shown = doc
            .strip_prefix(root())
            .unwrap_or(doc)
            .display()
            .to_string();
        for (line, target) in link_targets(&text) {
            if target.is_empty() || target.contains("://") || target.starts_with("mailto:") {
                continue;
            }
            let (file, anchor) = match target.split_once('#') {
                Some((f, a)) => (f, Some(a)),
                None => (target.as_str(), None),
            };
            let path = if file.is_empty() {
                doc.clone()
            } else {
                dir.join(file)
            };
            if !path.exists() {
                broken.push(format!("{shown}:{line}: `{target}`: no such file"));
                continue;
            }
            if let Some(anchor) = anchor
                && path.extension().is_some_and(|x| x == "md")
            {
                let md = std::fs::read_to_string(&path).expect("a Markdown file");
                if !anchors(&md).contains(anchor) {
                    broken.push(format!("{shown}:{line}: `{target}`: no such heading"));
                }
            }
        }
    }
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

#[test]
fn the_checks_see_what_they_should() {
    let text = "`crates/core` and crates/drivers/nats, crates/drivers/*, `crates/drivers`, \
                xcrates/nope, crates/core/src/runner/ and `fuzz/`";
    let want: BTreeSet<String> = ["crates/core", "crates/drivers/nats"]
        .into_iter()
        .map(String::from)
        .collect();
    assert_eq!(crate_paths(text), want);
    let schemes = quoted_schemes("`nats://` `amqp10s://h:1` `--from ws://x` http://not-quoted");
    assert_eq!(
        schemes.into_iter().collect::<Vec<_>>(),
        ["amqp10s", "nats", "ws"]
    );
    assert_eq!(
        slug("Verdicts: thresholds and exit codes"),
        "verdicts-thresholds-and-exit-codes"
    );
    assert_eq!(
        slug("Beyond one machine: segments, merge, Kubernetes"),
        "beyond-one-machine-segments-merge-kubernetes"
    );
    let md = "# A\n```sh\n# not a heading\n[x](nowhere.md)\n```\n## A\n[y](b.md#a-1 \"t\")";
    assert_eq!(anchors(md).into_iter().collect::<Vec<_>>(), ["a", "a-1"]);
    assert_eq!(link_targets(md), vec![(7, "b.md#a-1".to_string())]);
}
