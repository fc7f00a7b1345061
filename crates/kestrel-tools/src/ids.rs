//! Tool-call ids: `call_` and 24 letters and digits that look random but follow from a
//! per-request seed, so a request's streamed and whole answers carry the same ids.

/// Hands out a request's call ids in order.
#[derive(Clone, Debug)]
pub struct CallIds {
    seed: u64,
    issued: u64,
}

const ALPHABET: &[u8; 62] = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";

impl CallIds {
    /// Ids for one request; equal seeds give equal id sequences.
    pub fn new(seed: u64) -> CallIds {
        CallIds { seed, issued: 0 }
    }

    /// The next id.
    #[allow(clippy::should_implement_trait)] // never ends, so not an Iterator by intent
    pub fn next(&mut self) -> String {
        let mut state = self.seed ^ self.issued.wrapping_mul(0x9E37_79B9_7F4A_7C15);
        self.issued += 1;
        let mut id = String::with_capacity(29);
        id.push_str("call_");
        for _ in 0..4 {
            let mut word = splitmix64(&mut state);
            for _ in 0..6 {
                id.push(ALPHABET[(word % 62) as usize] as char);
                word /= 62;
            }
        }
        id
    }
}

/// SplitMix64: a small, well-mixed deterministic generator.
fn splitmix64(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_deterministic_distinct_and_well_formed() {
        let mut a = CallIds::new(7);
        let mut b = CallIds::new(7);
        let first = a.next();
        assert_eq!(first, b.next());
        assert_ne!(first, a.next());
        assert_ne!(first, CallIds::new(8).next());
        assert_eq!(first.len(), 29);
        assert!(first.starts_with("call_"));
        assert!(first[5..].bytes().all(|c| c.is_ascii_alphanumeric()));
    }
}
