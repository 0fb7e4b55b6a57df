//! Standard base64 (RFC 4648 alphabet): OpenAI's `encoding_format: "base64"` embeddings out, the
//! binary fields the tokenizers crate writes into tokenizer.json in.

const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/// With padding.
pub fn encode(bytes: &[u8]) -> String {
    let mut s = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for c in bytes.chunks(3) {
        let n = (c[0] as u32) << 16 | (*c.get(1).unwrap_or(&0) as u32) << 8 | *c.get(2).unwrap_or(&0) as u32;
        for (i, shift) in [18, 12, 6, 0].into_iter().enumerate() {
            s.push(if i <= c.len() { ALPHABET[(n >> shift & 63) as usize] as char } else { '=' });
        }
    }
    s
}

/// Padding optional; None on a character outside the alphabet.
pub fn decode(s: &str) -> Option<Vec<u8>> {
    let digit = |c: u8| ALPHABET.iter().position(|&a| a == c).map(|d| d as u8);
    let digits: Vec<u8> = s.trim_end_matches('=').bytes().map(digit).collect::<Option<_>>()?;
    let mut out = Vec::with_capacity(digits.len() * 3 / 4);
    for chunk in digits.chunks(4) {
        let n = chunk.iter().fold(0u32, |a, &d| (a << 6) | d as u32) << (6 * (4 - chunk.len()));
        out.extend_from_slice(&n.to_be_bytes()[1..chunk.len()]);
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pads_and_round_trips() {
        assert_eq!(encode(b""), "");
        assert_eq!(encode(b"f"), "Zg==");
        assert_eq!(encode(b"fo"), "Zm8=");
        assert_eq!(encode(b"foobar"), "Zm9vYmFy");
        assert_eq!(encode(&1.0f32.to_le_bytes()), "AACAPw==");
        for n in 0..40usize {
            let bytes: Vec<u8> = (0..n).map(|i| (i * 37 + 11) as u8).collect();
            let text = encode(&bytes);
            assert_eq!(decode(&text).as_deref(), Some(&bytes[..]), "{text}");
            assert_eq!(decode(text.trim_end_matches('=')).as_deref(), Some(&bytes[..]), "unpadded {text}");
        }
        assert_eq!(decode("Zm9v!"), None);
    }
}
