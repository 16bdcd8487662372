//! Where text is cut to fit a room, its characters stay whole: the bytes at the end that
//! start a UTF-8 character whose other bytes did not fit are left for what comes next. A client
//! that decodes each response or event on its own (the npm client's `text()` decodes each
//! response) would otherwise read a replacement character on each side of the cut.
use bytes::Bytes;

/// Removes from the end of `pieces` (read one after the other) the bytes that start a UTF-8
/// character whose other bytes are not there, and returns how many it removed (0 to 3).
pub(super) fn hold_back_unfinished_character(pieces: &mut Vec<Bytes>) -> usize {
    // The last three bytes, which may span pieces.
    let mut tail = Vec::with_capacity(3);
    for piece in pieces.iter().rev() {
        let take = (3 - tail.len()).min(piece.len());
        tail.splice(0..0, piece[piece.len() - take..].iter().copied());
        if tail.len() == 3 {
            break;
        }
    }
    let held = unfinished_character(&tail);
    let mut left = held;
    while left > 0 {
        let last = pieces.last_mut().expect("the bytes held are in the pieces");
        if last.len() <= left {
            left -= last.len();
            pieces.pop();
        } else {
            last.truncate(last.len() - left);
            left = 0;
        }
    }
    held
}

/// How many bytes at the end of `text` are the start of a UTF-8 character whose other bytes
/// are missing (0 to 3). Bytes that can never become a character count as whole: they go out
/// as they are.
pub(super) fn unfinished_character(text: &[u8]) -> usize {
    let tail = &text[text.len().saturating_sub(3)..];
    for (back, &byte) in tail.iter().rev().enumerate() {
        let width = match byte {
            0x80..=0xBF => continue, // a continuation byte: its lead is further back
            0xC2..=0xDF => 2,
            0xE0..=0xEF => 3,
            0xF0..=0xF4 => 4,
            _ => return 0,
        };
        let have = back + 1;
        return if have < width { have } else { 0 };
    }
    0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unfinished_character_is_held_back_and_a_whole_one_is_not() {
        let crab = "🦀".as_bytes(); // four bytes
        for cut in 1..4 {
            let mut text = b"hi ".to_vec();
            text.extend_from_slice(&crab[..cut]);
            assert_eq!(unfinished_character(&text), cut);
        }
        assert_eq!(unfinished_character("hi 🦀".as_bytes()), 0);
        assert_eq!(unfinished_character("é".as_bytes()), 0);
        assert_eq!(unfinished_character(&"é".as_bytes()[..1]), 1);
        assert_eq!(unfinished_character(b""), 0);
        // Bytes that can never be a character are not held.
        assert_eq!(unfinished_character(b"a\xff"), 0);
        assert_eq!(unfinished_character(b"\x80\x80\x80"), 0);
    }

    #[test]
    fn a_character_cut_across_pieces_is_held_back_whole() {
        let crab = Bytes::from_static("🦀".as_bytes());
        let mut pieces = vec![Bytes::from_static(b"ab"), crab.slice(..1), crab.slice(1..3)];
        assert_eq!(hold_back_unfinished_character(&mut pieces), 3);
        assert_eq!(pieces, vec![Bytes::from_static(b"ab")]);
        let mut whole = vec![Bytes::from_static(b"a"), crab.clone()];
        assert_eq!(hold_back_unfinished_character(&mut whole), 0);
        assert_eq!(whole, vec![Bytes::from_static(b"a"), crab]);
        let mut none: Vec<Bytes> = Vec::new();
        assert_eq!(hold_back_unfinished_character(&mut none), 0);
    }
}
