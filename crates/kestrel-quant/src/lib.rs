//! kestrel-quant
