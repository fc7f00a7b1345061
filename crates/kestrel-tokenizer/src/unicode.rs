//! Code point classes and the GPT-2 byte↔character mapping.
//!
//! The pre-tokenizers ask, for each code point, which coarse general category
//! it belongs to (letter, number, punctuation, ...) and whether it is white
//! space. Categories come from the generated `unicode_table` (Unicode 15.1,
//! the version llama.cpp's tables follow); white space is the Unicode
//! `White_Space` property. Byte-level BPE vocabularies spell every byte as a
//! printable character; `byte_char` / `char_byte` convert between the two.

use crate::unicode_table::CLASS_RUNS;

/// Flags of one code point. `EMPTY` (no bit set) stands for "past the end of
/// the text", which every class test treats as not matching.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub(crate) struct Flags(u16);

impl Flags {
    pub const EMPTY: Flags = Flags(0);
    const UNASSIGNED: u16 = 1;
    const NUMBER: u16 = 1 << 1;
    const LETTER: u16 = 1 << 2;
    const SEPARATOR: u16 = 1 << 3;
    const MARK: u16 = 1 << 4;
    const PUNCTUATION: u16 = 1 << 5;
    const SYMBOL: u16 = 1 << 6;
    const CONTROL: u16 = 1 << 7;
    const WHITESPACE: u16 = 1 << 8;

    pub fn of(cp: char) -> Flags {
        let c = cp as u32;
        let i = CLASS_RUNS.partition_point(|&(start, _)| start <= c);
        // CLASS_RUNS starts at 0, so i >= 1.
        let class = CLASS_RUNS[i.saturating_sub(1)].1;
        let mut bits = match class {
            0 => Self::CONTROL,
            1 => Self::LETTER,
            2 => Self::NUMBER,
            3 => Self::MARK,
            4 => Self::PUNCTUATION,
            5 => Self::SYMBOL,
            6 => Self::SEPARATOR,
            _ => Self::UNASSIGNED,
        };
        if is_white_space(cp) {
            bits |= Self::WHITESPACE;
        }
        Flags(bits)
    }

    pub fn is_empty(self) -> bool {
        self.0 == 0
    }
    pub fn is_letter(self) -> bool {
        self.0 & Self::LETTER != 0
    }
    pub fn is_number(self) -> bool {
        self.0 & Self::NUMBER != 0
    }
    pub fn is_whitespace(self) -> bool {
        self.0 & Self::WHITESPACE != 0
    }
    pub fn is_punctuation(self) -> bool {
        self.0 & Self::PUNCTUATION != 0
    }
    /// Neither white space, letter nor number (and not past the end): the
    /// class `[^\s\p{L}\p{N}]`.
    pub fn is_other(self) -> bool {
        self.0 != 0 && self.0 & (Self::WHITESPACE | Self::LETTER | Self::NUMBER) == 0
    }
}

/// The Unicode `White_Space` property.
fn is_white_space(c: char) -> bool {
    matches!(
        c,
        '\u{9}'..='\u{D}'
            | ' '
            | '\u{85}'
            | '\u{A0}'
            | '\u{1680}'
            | '\u{2000}'..='\u{200A}'
            | '\u{2028}'
            | '\u{2029}'
            | '\u{202F}'
            | '\u{205F}'
            | '\u{3000}'
    )
}

/// Bytes that GPT-2 keeps as their own Latin-1 character.
fn byte_is_printable(b: u8) -> bool {
    matches!(b, b'!'..=b'~' | 0xA1..=0xAC | 0xAE..=0xFF)
}

/// GPT-2's printable stand-in for each byte: printable bytes map to
/// themselves, the rest to U+0100 onwards in byte order.
pub(crate) fn byte_chars() -> [char; 256] {
    let mut table = ['\0'; 256];
    let mut next = 0x100u32;
    for b in 0..=255u8 {
        table[b as usize] = if byte_is_printable(b) {
            char::from(b)
        } else {
            let c = char::from_u32(next).unwrap_or('\u{FFFD}');
            next += 1;
            c
        };
    }
    table
}

/// Inverse of [`byte_chars`]: the byte a stand-in character encodes.
pub(crate) fn char_byte(c: char) -> Option<u8> {
    let v = c as u32;
    if v < 0x100 {
        let b = v as u8;
        return byte_is_printable(b).then_some(b);
    }
    // The n-th non-printable byte maps to U+0100 + n; those bytes are
    // 0x00..=0x20 (33), then 0x7F..=0xA0 (34), then 0xAD.
    match v - 0x100 {
        n @ 0..=32 => Some(n as u8),
        n @ 33..=66 => Some((0x7F + (n - 33)) as u8),
        67 => Some(0xAD),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classes() {
        assert!(Flags::of('a').is_letter());
        assert!(Flags::of('中').is_letter());
        assert!(Flags::of('7').is_number());
        assert!(Flags::of('½').is_number());
        assert!(Flags::of('\u{3000}').is_whitespace());
        assert!(Flags::of('!').is_punctuation());
        assert!(Flags::of('$').is_other());
        assert!(Flags::of('\u{378}').is_other()); // unassigned still counts as "other"
        assert!(!Flags::EMPTY.is_other());
        assert!(!Flags::of(' ').is_other());
    }

    #[test]
    fn byte_mapping_round_trips() {
        let t = byte_chars();
        assert_eq!(t[b' ' as usize], 'Ġ');
        assert_eq!(t[b'\n' as usize], 'Ċ');
        assert_eq!(t[b'a' as usize], 'a');
        for b in 0..=255u8 {
            assert_eq!(char_byte(t[b as usize]), Some(b));
        }
        assert_eq!(char_byte('中'), None);
    }
}
