//! Feeds arbitrary bytes to the GGUF parser; on success also renders the
//! inspect report and touches every tensor's data, which must be in bounds.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(f) = kestrel_gguf::GgufFile::from_bytes(data.to_vec()) {
        let _ = kestrel_gguf::inspect_report(&f);
        for t in f.tensors() {
            assert_eq!(f.tensor_data(t).len() as u64, t.n_bytes);
        }
    }
});
