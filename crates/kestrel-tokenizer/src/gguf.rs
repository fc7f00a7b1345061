//! Reading [`VocabData`] out of GGUF metadata (`tokenizer.ggml.*` keys).

use kestrel_gguf::GgufFile;

use crate::error::TokenizerError;
use crate::tokenizer::VocabData;

/// Reads the vocabulary keys. Absent optional keys stay `None`; present keys
/// of the wrong type are errors naming the key.
pub(crate) fn vocab_from_gguf(f: &GgufFile) -> Result<VocabData, TokenizerError> {
    const MODEL: &str = "tokenizer.ggml.model";
    const TOKENS: &str = "tokenizer.ggml.tokens";
    let present = |k: &str| f.get(k).is_some();

    let model = match f.get_str(MODEL) {
        Some(m) => m.to_owned(),
        None if present(MODEL) => return Err(wrong(MODEL, "a string")),
        None => return Err(TokenizerError::MissingKey(MODEL)),
    };
    let tokens = match f.get_str_array(TOKENS) {
        Some(t) => t.to_vec(),
        None if present(TOKENS) => return Err(wrong(TOKENS, "an array of strings")),
        None => return Err(TokenizerError::MissingKey(TOKENS)),
    };
    let opt_str = |k: &'static str| -> Result<Option<String>, TokenizerError> {
        match f.get_str(k) {
            Some(s) => Ok(Some(s.to_owned())),
            None if present(k) => Err(wrong(k, "a string")),
            None => Ok(None),
        }
    };
    let opt_u32 = |k: &'static str| -> Result<Option<u32>, TokenizerError> {
        match f.get_u32(k) {
            Some(v) => Ok(Some(v)),
            None if present(k) => Err(wrong(k, "an unsigned integer")),
            None => Ok(None),
        }
    };
    let opt_bool = |k: &'static str| -> Result<Option<bool>, TokenizerError> {
        match f.get_bool(k) {
            Some(v) => Ok(Some(v)),
            None if present(k) => Err(wrong(k, "a bool")),
            None => Ok(None),
        }
    };
    const SCORES: &str = "tokenizer.ggml.scores";
    let scores = match (f.get_f32_array(SCORES), f.get_i32_array(SCORES)) {
        (Some(s), _) => Some(s.to_vec()),
        (None, Some(s)) => Some(s.iter().map(|&v| v as f32).collect()),
        _ if present(SCORES) => return Err(wrong(SCORES, "an array of f32 or i32")),
        _ => None,
    };
    const TYPES: &str = "tokenizer.ggml.token_type";
    let token_types = match f.get_i32_array(TYPES) {
        Some(t) => Some(t.to_vec()),
        None if present(TYPES) => return Err(wrong(TYPES, "an array of i32")),
        None => None,
    };
    const MERGES: &str = "tokenizer.ggml.merges";
    let merges = match f.get_str_array(MERGES) {
        Some(m) => Some(m.to_vec()),
        None if present(MERGES) => return Err(wrong(MERGES, "an array of strings")),
        None => None,
    };
    // The FIM ids also have older names; llama.cpp reads those last.
    let fim = |new: &'static str, old: &'static str| -> Result<Option<u32>, TokenizerError> {
        Ok(opt_u32(old)?.or(opt_u32(new)?))
    };
    Ok(VocabData {
        model,
        pre: opt_str("tokenizer.ggml.pre")?,
        tokens,
        scores,
        token_types,
        merges,
        bos_id: opt_u32("tokenizer.ggml.bos_token_id")?,
        eos_id: opt_u32("tokenizer.ggml.eos_token_id")?,
        eot_id: opt_u32("tokenizer.ggml.eot_token_id")?,
        eom_id: opt_u32("tokenizer.ggml.eom_token_id")?,
        unk_id: opt_u32("tokenizer.ggml.unknown_token_id")?,
        sep_id: opt_u32("tokenizer.ggml.seperator_token_id")?,
        pad_id: opt_u32("tokenizer.ggml.padding_token_id")?,
        mask_id: opt_u32("tokenizer.ggml.mask_token_id")?,
        fim_pre_id: fim(
            "tokenizer.ggml.fim_pre_token_id",
            "tokenizer.ggml.prefix_token_id",
        )?,
        fim_suf_id: fim(
            "tokenizer.ggml.fim_suf_token_id",
            "tokenizer.ggml.suffix_token_id",
        )?,
        fim_mid_id: fim(
            "tokenizer.ggml.fim_mid_token_id",
            "tokenizer.ggml.middle_token_id",
        )?,
        fim_pad_id: opt_u32("tokenizer.ggml.fim_pad_token_id")?,
        fim_rep_id: opt_u32("tokenizer.ggml.fim_rep_token_id")?,
        fim_sep_id: opt_u32("tokenizer.ggml.fim_sep_token_id")?,
        add_bos: opt_bool("tokenizer.ggml.add_bos_token")?,
        add_eos: opt_bool("tokenizer.ggml.add_eos_token")?,
        add_space_prefix: opt_bool("tokenizer.ggml.add_space_prefix")?,
        remove_extra_whitespaces: opt_bool("tokenizer.ggml.remove_extra_whitespaces")?,
    })
}

fn wrong(key: &'static str, expected: &'static str) -> TokenizerError {
    TokenizerError::WrongType { key, expected }
}
