//! kestrel-tokenizer
