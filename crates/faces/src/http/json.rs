//! JSON mode's framing of reads: a read returns its messages as one JSON array. (What a
//! message is, splitting an append's body, is the recorder's: `recorder::streams`.)
use bytes::{BufMut, Bytes, BytesMut};

/// `messages` as one JSON array.
pub(crate) fn array<'a>(messages: impl IntoIterator<Item = &'a [u8]>) -> Bytes {
    let mut body = BytesMut::new();
    body.put_u8(b'[');
    for (i, message) in messages.into_iter().enumerate() {
        if i > 0 {
            body.put_u8(b',');
        }
        body.put_slice(message);
    }
    body.put_u8(b']');
    body.freeze()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_read_as_one_array() {
        let parts: [&[u8]; 2] = [b"1", b"{}"];
        assert_eq!(&array(parts)[..], b"[1,{}]");
    }
}
