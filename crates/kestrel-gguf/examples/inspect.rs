//! Prints the inspect report for each GGUF file named on the command line.
fn main() {
    let mut failed = false;
    for path in std::env::args().skip(1) {
        match kestrel_gguf::GgufFile::open(&path) {
            Ok(f) => println!("== {path}\n{}", kestrel_gguf::inspect_report(&f)),
            Err(e) => {
                eprintln!("{path}: {e}");
                failed = true;
            }
        }
    }
    std::process::exit(i32::from(failed));
}
