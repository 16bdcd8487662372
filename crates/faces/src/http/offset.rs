//! Offsets on the HTTP face: tapedeck's byte offsets, written in a fixed width so that
//! lexicographic order is byte order (`0000000000000000_` and 16 decimal digits: the form the
//! protocol's reference servers use, which its conformance suite assumes for the start), and
//! the protocol's two sentinels, `-1` and `now`.
use std::fmt;

/// Digits of the byte offset.
const WIDTH: usize = 16;
/// What comes before the byte offset: a segment number, always 0 here.
const PREFIX: &str = "0000000000000000_";
/// The zeros that pad the byte offset to its width.
const ZEROS: &str = "0000000000000000";

/// Where a read starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ReadFrom {
    /// A byte offset.
    At(u64),
    /// The current tail (`offset=now`).
    Now,
}

/// A byte offset in its wire form.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Offset(pub(crate) u64);

impl fmt::Display for Offset {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut digits = itoa::Buffer::new();
        self.parts(&mut digits)
            .into_iter()
            .try_for_each(|part| f.write_str(part))
    }
}

impl Offset {
    /// Writes the wire form to `out`, as [`Display`](fmt::Display) does but without the
    /// formatting machinery: every SSE event carries an offset twice, for every reader.
    pub(crate) fn put(self, out: &mut impl bytes::BufMut) {
        let mut digits = itoa::Buffer::new();
        for part in self.parts(&mut digits) {
            out.put_slice(part.as_bytes());
        }
    }

    /// The wire form's three parts: the prefix, the padding, the digits.
    fn parts(self, digits: &mut itoa::Buffer) -> [&str; 3] {
        let digits = digits.format(self.0);
        let padding = &ZEROS[..WIDTH.saturating_sub(digits.len())];
        [PREFIX, padding, digits]
    }

    /// A wire offset, exactly as [`Display`](fmt::Display) writes it.
    pub(crate) fn parse(text: &str) -> Option<Offset> {
        let digits = text.strip_prefix(PREFIX)?;
        if digits.len() != WIDTH || !digits.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        digits.parse().ok().map(Offset)
    }
}

impl ReadFrom {
    /// The `offset` query parameter: absent or `-1` is the start, `now` the tail.
    pub(crate) fn parse(param: Option<&str>) -> Option<ReadFrom> {
        match param {
            None | Some("-1") => Some(ReadFrom::At(0)),
            Some("now") => Some(ReadFrom::Now),
            Some(text) => Offset::parse(text).map(|o| ReadFrom::At(o.0)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_offset_puts_what_it_displays() {
        for o in [0u64, 7, 10, 1_000_000, 9_999_999_999_999_999, u64::MAX] {
            let mut out = bytes::BytesMut::new();
            Offset(o).put(&mut out);
            assert_eq!(&out[..], format!("{PREFIX}{o:0WIDTH$}").as_bytes());
            assert_eq!(Offset(o).to_string(), format!("{PREFIX}{o:0WIDTH$}"));
        }
    }

    #[test]
    fn offsets_sort_as_bytes_do() {
        let offsets = [0u64, 9, 10, 99, 1_000_000, 9_999_999_999_999_999];
        let texts: Vec<String> = offsets.iter().map(|&o| Offset(o).to_string()).collect();
        assert!(texts.windows(2).all(|w| w[0] < w[1]));
        for (&o, text) in offsets.iter().zip(&texts) {
            assert_eq!(Offset::parse(text), Some(Offset(o)));
        }
    }

    #[test]
    fn sentinels_and_malformed_offsets() {
        assert_eq!(ReadFrom::parse(None), Some(ReadFrom::At(0)));
        assert_eq!(ReadFrom::parse(Some("-1")), Some(ReadFrom::At(0)));
        assert_eq!(ReadFrom::parse(Some("now")), Some(ReadFrom::Now));
        let bad_offsets = [
            "",
            "12",
            "-2",
            "0000000000000000_000000000000000a",
            "9999999999999999_9999999999999999",
            "0000000000000000_00000000000000001",
            " 0000000000000000_0000000000000001",
        ];
        for bad in bad_offsets {
            assert_eq!(ReadFrom::parse(Some(bad)), None, "{bad}");
        }
    }
}
