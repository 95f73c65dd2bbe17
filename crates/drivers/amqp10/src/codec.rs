//! The AMQP 1.0 type system (spec part 1): what msgbench writes and reads, without a generic
//! value tree on the hot path.
//!
//! Writing ([`Enc`]): primitives in their shortest encoding, described lists whose size and
//! count are patched in when the list is finished, maps of application properties and symbol
//! arrays. Reading ([`Dec`]): a cursor over one frame that yields [`Value`]s borrowing from the
//! frame: strings, symbols and binaries are slices, and lists, maps and arrays are handed out
//! unparsed (a [`Dec`] over their items), so a transfer's fields are read without allocating.

use bytes::{BufMut, BytesMut};
use std::fmt;

/// A malformed encoding (the peer is not speaking AMQP 1.0 as we understand it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CodecError(pub String);

impl fmt::Display for CodecError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "malformed AMQP 1.0 data: {}", self.0)
    }
}

impl std::error::Error for CodecError {}

fn bad(what: impl Into<String>) -> CodecError {
    CodecError(what.into())
}

/// One decoded value, borrowing from the frame.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Value<'a> {
    /// `null` (0x40, spec 1.6.1). Also what [`Dec::read`] yields past the end of a list, so
    /// a field left out and a field sent as null read the same: absent.
    Null,
    /// `boolean` (1.6.2): `true` (0x41), `false` (0x42), or the one-octet form 0x56, where any
    /// non-zero octet is true.
    Bool(bool),
    /// ubyte, ushort, uint, ulong.
    Uint(u64),
    /// byte, short, int, long.
    Int(i64),
    /// float, double.
    Float(f64),
    /// Milliseconds since the Unix epoch.
    Timestamp(i64),
    /// A char (UTF-32 code point).
    Char(u32),
    /// `uuid` (0x98, 1.6.18): the 16 octets in the order they were sent (RFC 4122 network
    /// order).
    Uuid([u8; 16]),
    /// `binary` (vbin8 0xa0, vbin32 0xb0; 1.6.19): the octets, borrowed from the frame.
    Binary(&'a [u8]),
    /// `string` (str8-utf8 0xa1, str32-utf8 0xb1; 1.6.20), borrowed from the frame. Checked
    /// to be UTF-8: a string that is not is a [`CodecError`], never a lossy copy.
    Str(&'a str),
    /// `symbol` (sym8 0xa3, sym32 0xb3; 1.6.21): names such as capabilities, SASL mechanisms
    /// and error conditions. ASCII by the spec, accepted as any UTF-8; [`Value::as_str`] reads
    /// it as it reads a string, since peers differ on which of the two they send.
    Symbol(&'a str),
    /// A list: its items, unparsed.
    List(Dec<'a>),
    /// A map: keys and values alternating, unparsed.
    Map(Dec<'a>),
    /// An array: its elements, unparsed (all share one constructor).
    Array(Dec<'a>),
    /// A described value: the descriptor (a numeric code; a symbolic descriptor reads as 0)
    /// and the value, unparsed.
    Described(u64, Dec<'a>),
    /// A decimal or other value msgbench has no use for.
    Other,
}

impl<'a> Value<'a> {
    /// Null reads as absent.
    pub fn some(self) -> Option<Value<'a>> {
        (self != Value::Null).then_some(self)
    }

    /// An integer that is not negative, as `u64`: any unsigned width, or a signed one holding
    /// a value >= 0 (a peer encoding an unsigned field with a signed type is still
    /// understood). `None` for a negative integer, any other type, and `Null`, so an absent
    /// field falls back to the caller's default (`unwrap_or` the spec's).
    pub fn as_uint(self) -> Option<u64> {
        match self {
            Value::Uint(n) => Some(n),
            Value::Int(n) => u64::try_from(n).ok(),
            _ => None,
        }
    }

    /// [`Value::as_uint`] narrowed to `u32`, the width of the spec's `uint` fields (handles,
    /// delivery ids, transfer ids, windows, credit, frame sizes, milliseconds). `None` also when
    /// the value does not fit, rather than truncating it.
    pub fn as_u32(self) -> Option<u32> {
        self.as_uint().and_then(|n| u32::try_from(n).ok())
    }

    /// A `boolean`; `None` for anything else, numbers included (no truthiness), and for an
    /// absent field, whose spec default the caller supplies (mostly `false`).
    pub fn as_bool(self) -> Option<bool> {
        match self {
            Value::Bool(b) => Some(b),
            _ => None,
        }
    }

    /// A string or symbol.
    pub fn as_str(self) -> Option<&'a str> {
        match self {
            Value::Str(s) | Value::Symbol(s) => Some(s),
            _ => None,
        }
    }
}

/// Deepest nesting of described values accepted (msgbench's peers send at most two levels:
/// a described section whose value is a described list).
pub const MAX_DESCRIBED: usize = 16;

/// A cursor over encoded values (a frame body, or the items of a list, map or array).
#[derive(Clone, Copy, PartialEq)]
pub struct Dec<'a> {
    buf: &'a [u8],
    pos: usize,
    /// Items left (lists, maps, arrays), or `u32::MAX` for a plain byte stream.
    left: u32,
    /// The shared constructor of an array's elements.
    elem: Option<(u8, Option<u64>)>,
}

impl fmt::Debug for Dec<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "Dec({} bytes, {} left)",
            self.buf.len() - self.pos,
            self.left
        )
    }
}

impl<'a> Dec<'a> {
    /// A cursor over `buf`.
    pub fn new(buf: &'a [u8]) -> Dec<'a> {
        Dec {
            buf,
            pos: 0,
            left: u32::MAX,
            elem: None,
        }
    }

    /// The next value and its encoding as it was received (to echo a terminus back verbatim).
    pub fn read_raw(&mut self) -> Result<(Value<'a>, &'a [u8]), CodecError> {
        let start = self.pos;
        let v = self.read()?;
        Ok((v, &self.buf[start.min(self.pos)..self.pos]))
    }

    /// Bytes consumed so far.
    pub fn pos(&self) -> usize {
        self.pos
    }

    /// Whether nothing is left.
    pub fn is_empty(&self) -> bool {
        self.left == 0 || self.pos >= self.buf.len()
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], CodecError> {
        let end = self.pos.checked_add(n).filter(|&e| e <= self.buf.len());
        let Some(end) = end else {
            return Err(bad(format!(
                "{n} bytes wanted, {} left",
                self.buf.len() - self.pos
            )));
        };
        let s = &self.buf[self.pos..end];
        self.pos = end;
        Ok(s)
    }

    fn u8(&mut self) -> Result<u8, CodecError> {
        Ok(self.take(1)?[0])
    }

    fn be<const N: usize>(&mut self) -> Result<[u8; N], CodecError> {
        let mut a = [0u8; N];
        a.copy_from_slice(self.take(N)?);
        Ok(a)
    }

    fn u32(&mut self) -> Result<u32, CodecError> {
        Ok(u32::from_be_bytes(self.be()?))
    }

    /// The next value, or `Null` past the end of a list (absent trailing fields).
    pub fn read(&mut self) -> Result<Value<'a>, CodecError> {
        if self.is_empty() {
            return Ok(Value::Null);
        }
        if self.left != u32::MAX {
            self.left -= 1;
        }
        match self.elem {
            // Arrays of described values (never sent to a client in practice) are skipped.
            Some((code, Some(_))) => self.body(code).map(|_| Value::Other),
            Some((code, None)) => self.body(code),
            None => self.value(0),
        }
    }

    /// A value; `depth`: how many described values it is nested in (a descriptor or a
    /// described value may itself be described), refused past [`MAX_DESCRIBED`] so that a
    /// frame of `0x00` octets cannot recurse until the stack overflows.
    fn value(&mut self, depth: usize) -> Result<Value<'a>, CodecError> {
        let code = self.u8()?;
        if code == 0x00 {
            if depth >= MAX_DESCRIBED {
                return Err(bad("described values nested too deeply"));
            }
            let descriptor = match self.value(depth + 1)? {
                Value::Uint(n) => n,
                _ => 0,
            };
            let start = self.pos;
            self.value(depth + 1)?;
            let inner = Dec::new(&self.buf[start..self.pos]);
            return Ok(Value::Described(descriptor, inner));
        }
        self.body(code)
    }

    /// The value after constructor `code`.
    fn body(&mut self, code: u8) -> Result<Value<'a>, CodecError> {
        Ok(match code {
            0x40 => Value::Null,
            0x41 => Value::Bool(true),
            0x42 => Value::Bool(false),
            0x56 => Value::Bool(self.u8()? != 0),
            0x43 | 0x44 => Value::Uint(0),
            0x50 | 0x52 | 0x53 => Value::Uint(self.u8()? as u64),
            0x60 => Value::Uint(u16::from_be_bytes(self.be()?) as u64),
            0x70 => Value::Uint(self.u32()? as u64),
            0x80 => Value::Uint(u64::from_be_bytes(self.be()?)),
            0x51 | 0x54 | 0x55 => Value::Int(self.u8()? as i8 as i64),
            0x61 => Value::Int(i16::from_be_bytes(self.be()?) as i64),
            0x71 => Value::Int(i32::from_be_bytes(self.be()?) as i64),
            0x81 => Value::Int(i64::from_be_bytes(self.be()?)),
            0x72 => Value::Float(f32::from_be_bytes(self.be()?) as f64),
            0x82 => Value::Float(f64::from_be_bytes(self.be()?)),
            0x73 => Value::Char(self.u32()?),
            0x83 => Value::Timestamp(i64::from_be_bytes(self.be()?)),
            0x98 => Value::Uuid(self.be()?),
            0x74 => {
                self.take(4)?;
                Value::Other
            }
            0x84 => {
                self.take(8)?;
                Value::Other
            }
            0x94 => {
                self.take(16)?;
                Value::Other
            }
            0xa0 | 0xb0 => {
                let n = self.len(code)?;
                Value::Binary(self.take(n)?)
            }
            0xa1 | 0xb1 | 0xa3 | 0xb3 => {
                let n = self.len(code)?;
                let s = std::str::from_utf8(self.take(n)?)
                    .map_err(|_| bad("a string that is not UTF-8"))?;
                if code & 0x0f == 0x03 {
                    Value::Symbol(s)
                } else {
                    Value::Str(s)
                }
            }
            0x45 => Value::List(Dec {
                buf: &[],
                pos: 0,
                left: 0,
                elem: None,
            }),
            0xc0 | 0xd0 | 0xc1 | 0xd1 => {
                let wide = code & 0xf0 == 0xd0;
                let size = if wide {
                    self.u32()? as usize
                } else {
                    self.u8()? as usize
                };
                let body = self.take(size)?;
                let mut d = Dec::new(body);
                let count = if wide { d.u32()? } else { d.u8()? as u32 };
                d.left = count;
                if code & 0x0f == 0x00 {
                    Value::List(d)
                } else {
                    Value::Map(d)
                }
            }
            0xe0 | 0xf0 => {
                let wide = code == 0xf0;
                let size = if wide {
                    self.u32()? as usize
                } else {
                    self.u8()? as usize
                };
                let body = self.take(size)?;
                let mut d = Dec::new(body);
                let count = if wide { d.u32()? } else { d.u8()? as u32 };
                let mut ctor = d.u8()?;
                let mut descriptor = None;
                if ctor == 0x00 {
                    descriptor = d.value(0)?.as_uint();
                    ctor = d.u8()?;
                }
                // Elements of zero width (null, true, false, uint0, ulong0, list0) take no
                // bytes, so a count is otherwise bounded by the bytes left: more than either is
                // a count no peer means, which would cost its readers a loop per element
                // (4 billion from a 13-byte array).
                let left = d.buf.len() - d.pos;
                if count > 255 && count as usize > left {
                    return Err(bad(format!("an array of {count} elements in {left} bytes")));
                }
                d.left = count;
                d.elem = Some((ctor, descriptor));
                Value::Array(d)
            }
            other => return Err(bad(format!("unknown type constructor 0x{other:02x}"))),
        })
    }

    fn len(&mut self, code: u8) -> Result<usize, CodecError> {
        Ok(if code & 0xf0 == 0xb0 {
            self.u32()? as usize
        } else {
            self.u8()? as usize
        })
    }

    /// The rest of the buffer, unread.
    pub fn rest(&self) -> &'a [u8] {
        &self.buf[self.pos.min(self.buf.len())..]
    }
}

/// Writes values into a buffer. Lists are opened with [`Enc::list`] and closed with
/// [`Enc::end`], which patches in their size and count.
pub struct Enc<'b> {
    /// The buffer values are appended to. Public so that bytes encoded elsewhere can follow
    /// the values (a transfer's message after its performative); bytes written here directly
    /// are not counted as items, so write to it only when no list or map is open.
    pub buf: &'b mut BytesMut,
    /// Open lists and maps: (offset of the size field, items written).
    open: Vec<(usize, u32)>,
}

impl<'b> Enc<'b> {
    /// An encoder appending to the end of `buf` (what is already there stays), with no list
    /// open. Every [`Enc::list`] and [`Enc::map`] must be closed with [`Enc::end`] before the
    /// encoder is dropped: an unclosed one keeps a size and count of zero, which is malformed.
    pub fn new(buf: &'b mut BytesMut) -> Enc<'b> {
        Enc {
            buf,
            open: Vec::new(),
        }
    }

    fn item(&mut self) {
        if let Some(top) = self.open.last_mut() {
            top.1 += 1;
        }
    }

    /// `null` (0x40): how a field is left out when a later field of the same list is given
    /// (trailing absent fields are simply not written).
    pub fn null(&mut self) -> &mut Self {
        self.item();
        self.buf.put_u8(0x40);
        self
    }

    /// A `boolean` in its one-octet forms, `true` (0x41) or `false` (0x42).
    pub fn bool(&mut self, b: bool) -> &mut Self {
        self.item();
        self.buf.put_u8(if b { 0x41 } else { 0x42 });
        self
    }

    /// A `ubyte` (0x50, 1.6.3): the settle modes of `attach` (2.8.2, 2.8.3) and the
    /// `sasl-outcome` code (5.3.3.6) are ubytes.
    pub fn ubyte(&mut self, n: u8) -> &mut Self {
        self.item();
        self.buf.put_u8(0x50);
        self.buf.put_u8(n);
        self
    }

    /// A `ushort` (0x60, 1.6.4): channel numbers (`open`'s channel-max, `begin`'s
    /// remote-channel).
    pub fn ushort(&mut self, n: u16) -> &mut Self {
        self.item();
        self.buf.put_u8(0x60);
        self.buf.put_u16(n);
        self
    }

    /// A `uint` (1.6.5) in its shortest form: `uint0` (0x43) for 0, `smalluint` (0x52) up to
    /// 255, four octets (0x70) above. Handles, ids, windows, credit and frame sizes are uints.
    pub fn uint(&mut self, n: u32) -> &mut Self {
        self.unsigned(n as u64, [0x43, 0x52, 0x70], 4)
    }

    /// A `ulong` (1.6.6) in its shortest form: `ulong0` (0x44) for 0, `smallulong` (0x53) up
    /// to 255, eight octets (0x80) above.
    pub fn ulong(&mut self, n: u64) -> &mut Self {
        self.unsigned(n, [0x44, 0x53, 0x80], 8)
    }

    /// An unsigned integer as zero, one byte or `width` bytes (constructors in that order).
    fn unsigned(&mut self, n: u64, codes: [u8; 3], width: usize) -> &mut Self {
        self.item();
        match n {
            0 => self.buf.put_u8(codes[0]),
            1..=255 => {
                self.buf.put_u8(codes[1]);
                self.buf.put_u8(n as u8);
            }
            _ => {
                self.buf.put_u8(codes[2]);
                self.buf.put_slice(&n.to_be_bytes()[8 - width..]);
            }
        }
        self
    }

    /// A `long` (1.6.10): `smalllong` (0x55) for -128..=127, eight octets (0x81) otherwise.
    /// Integer application properties are written as longs, whatever their size, so a reader
    /// sees one type.
    pub fn long(&mut self, n: i64) -> &mut Self {
        self.item();
        if let Ok(b) = i8::try_from(n) {
            self.buf.put_u8(0x55);
            self.buf.put_i8(b);
        } else {
            self.buf.put_u8(0x81);
            self.buf.put_i64(n);
        }
        self
    }

    /// A `timestamp` (0x83, 1.6.17): `ms` milliseconds since the Unix epoch, signed (the
    /// `creation-time` of a message's properties).
    pub fn timestamp(&mut self, ms: i64) -> &mut Self {
        self.item();
        self.buf.put_u8(0x83);
        self.buf.put_i64(ms);
        self
    }

    fn var(&mut self, short: u8, long: u8, b: &[u8]) -> &mut Self {
        self.item();
        if b.len() < 256 {
            self.buf.put_u8(short);
            self.buf.put_u8(b.len() as u8);
        } else {
            self.buf.put_u8(long);
            self.buf.put_u32(b.len() as u32);
        }
        self.buf.put_slice(b);
        self
    }

    /// A `binary` (1.6.19): `vbin8` (0xa0) below 256 octets, `vbin32` (0xb0) from 256 on.
    /// The length is written as a `u32` unchecked: `b` must be shorter than 4 GiB (a frame
    /// is at most [`MAX_FRAME`](crate::frames::MAX_FRAME) anyway).
    pub fn binary(&mut self, b: &[u8]) -> &mut Self {
        self.var(0xa0, 0xb0, b)
    }

    /// A `string` (1.6.20): `str8-utf8` (0xa1) below 256 octets, `str32-utf8` (0xb1) from 256
    /// on; the same length limit as [`Enc::binary`].
    pub fn str(&mut self, s: &str) -> &mut Self {
        self.var(0xa1, 0xb1, s.as_bytes())
    }

    /// A `symbol` (1.6.21): `sym8` (0xa3) below 256 octets, `sym32` (0xb3) from 256 on. The
    /// spec restricts symbols to ASCII; that is not checked, so pass names that are (SASL
    /// mechanisms, error conditions, capabilities).
    pub fn symbol(&mut self, s: &str) -> &mut Self {
        self.var(0xa3, 0xb3, s.as_bytes())
    }

    /// An array of symbols (capabilities); a single symbol is allowed in its place by the
    /// spec, but an array is what every broker accepts.
    pub fn symbols(&mut self, syms: &[String]) -> &mut Self {
        self.item();
        self.buf.put_u8(0xf0);
        let at = self.buf.len();
        self.buf.put_u32(0);
        self.buf.put_u32(syms.len() as u32);
        self.buf.put_u8(0xb3);
        for s in syms {
            self.buf.put_u32(s.len() as u32);
            self.buf.put_slice(s.as_bytes());
        }
        let size = (self.buf.len() - at - 4) as u32;
        self.buf[at..at + 4].copy_from_slice(&size.to_be_bytes());
        self
    }

    /// An already encoded value (one item), written as it is: a terminus echoed back.
    pub fn raw(&mut self, encoded: &[u8]) -> &mut Self {
        self.item();
        self.buf.put_slice(encoded);
        self
    }

    /// The descriptor `code` of the value written next (which counts as the list item).
    pub fn described(&mut self, code: u64) -> &mut Self {
        self.buf.put_u8(0x00);
        self.buf.put_u8(0x53);
        self.buf.put_u8(code as u8);
        self
    }

    /// Starts a described list with descriptor `code` (close it with [`Enc::end`]).
    pub fn list(&mut self, code: u64) -> &mut Self {
        self.described(code).open_compound(0xd0)
    }

    /// Starts a described map (application properties; close it with [`Enc::end`]).
    pub fn map(&mut self, code: u64) -> &mut Self {
        self.described(code).open_compound(0xd1)
    }

    fn open_compound(&mut self, ctor: u8) -> &mut Self {
        self.item();
        self.buf.put_u8(ctor);
        let at = self.buf.len();
        self.buf.put_u32(0);
        self.buf.put_u32(0);
        self.open.push((at, 0));
        self
    }

    /// Closes the innermost list or map.
    pub fn end(&mut self) -> &mut Self {
        if let Some((at, count)) = self.open.pop() {
            let size = (self.buf.len() - at - 4) as u32;
            self.buf[at..at + 4].copy_from_slice(&size.to_be_bytes());
            self.buf[at + 4..at + 8].copy_from_slice(&count.to_be_bytes());
        }
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_round_trip_in_their_short_forms() {
        let mut b = BytesMut::new();
        let mut e = Enc::new(&mut b);
        e.list(0x10)
            .str("container")
            .null()
            .uint(0)
            .uint(200)
            .uint(1 << 20)
            .ulong(7)
            .long(-3)
            .long(1 << 40)
            .bool(true)
            .binary(&[1, 2, 3])
            .symbols(&["queue".into(), "shared".into()])
            .timestamp(1_700_000_000_123)
            .end();
        let mut d = Dec::new(&b);
        let Value::Described(0x10, mut inner) = d.read().unwrap() else {
            panic!("not a described list");
        };
        assert!(d.is_empty());
        let Value::List(mut l) = inner.read().unwrap() else {
            panic!("not a list");
        };
        assert_eq!(l.read().unwrap(), Value::Str("container"));
        assert_eq!(l.read().unwrap(), Value::Null);
        assert_eq!(l.read().unwrap().as_uint(), Some(0));
        assert_eq!(l.read().unwrap().as_uint(), Some(200));
        assert_eq!(l.read().unwrap().as_uint(), Some(1 << 20));
        assert_eq!(l.read().unwrap().as_uint(), Some(7));
        assert_eq!(l.read().unwrap(), Value::Int(-3));
        assert_eq!(l.read().unwrap(), Value::Int(1 << 40));
        assert_eq!(l.read().unwrap(), Value::Bool(true));
        assert_eq!(l.read().unwrap(), Value::Binary(&[1, 2, 3]));
        let Value::Array(mut a) = l.read().unwrap() else {
            panic!("not an array");
        };
        assert_eq!(a.read().unwrap(), Value::Symbol("queue"));
        assert_eq!(a.read().unwrap(), Value::Symbol("shared"));
        assert!(a.is_empty());
        assert_eq!(l.read().unwrap(), Value::Timestamp(1_700_000_000_123));
        // Past the end: absent fields read as null.
        assert_eq!(l.read().unwrap(), Value::Null);
    }

    #[test]
    fn long_strings_and_short_lists_from_other_encoders() {
        let long = "x".repeat(300);
        let mut b = BytesMut::new();
        Enc::new(&mut b).str(&long);
        assert_eq!(b[0], 0xb1);
        assert_eq!(Dec::new(&b).read().unwrap(), Value::Str(&long));
        // list8 with two items (a uint0 and a sym8), as Java brokers write them.
        let raw = [0xc0, 0x06, 0x02, 0x43, 0xa3, 0x02, b'o', b'k'];
        let Value::List(mut l) = Dec::new(&raw).read().unwrap() else {
            panic!()
        };
        assert_eq!(l.read().unwrap(), Value::Uint(0));
        assert_eq!(l.read().unwrap(), Value::Symbol("ok"));
        assert!(l.is_empty());
        // Truncated data is an error, not a panic.
        assert!(Dec::new(&[0xb1, 0, 0, 1, 0, b'x']).read().is_err());
        assert!(Dec::new(&[0xff]).read().is_err());
    }

    /// Fuzzing (fuzz target amqp10_frames) found a 13-byte array claiming 4 billion `true`s,
    /// which took its reader minutes; counts are now bounded by the bytes left.
    #[test]
    fn fuzz_an_array_of_billions_of_zero_width_elements_is_refused() {
        let huge = [0xf0, 0, 0, 0, 6, 0xff, 0xff, 0xff, 0xff, 0x41, 0];
        assert!(Dec::new(&huge).read().is_err());
        // 8-bit counts and counts the bytes can hold still read.
        let Value::Array(mut a) = Dec::new(&[0xe0, 3, 200, 0x41, 0]).read().unwrap() else {
            panic!("an array");
        };
        let mut n = 0;
        while !a.is_empty() {
            assert_eq!(a.read(), Ok(Value::Bool(true)));
            n += 1;
        }
        assert_eq!(n, 200);
    }

    /// Found while writing the amqp10_codec fuzz target (libFuzzer's 4 KiB inputs nest too
    /// little to overflow its 8 MiB stack): a frame of `0x00` octets nests described values
    /// one per octet, and the reader's recursion overflowed the stack (2 MiB on tokio's
    /// workers, and a frame may be 1 MiB).
    #[test]
    fn fuzz_described_values_nested_without_end_are_refused() {
        let deep = vec![0u8; 1 << 20];
        let refused = std::thread::Builder::new()
            .stack_size(256 * 1024)
            .spawn(move || Dec::new(&deep).read().is_err())
            .unwrap()
            .join()
            .unwrap();
        assert!(refused);
        // Two levels, as sections are sent, still read.
        let v = [0x00, 0x53, 0x70, 0x00, 0x53, 0x01, 0x45];
        assert!(matches!(Dec::new(&v).read(), Ok(Value::Described(0x70, _))));
    }
}
