//! kestrel-sampling
