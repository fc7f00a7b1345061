//! Handing freed heap memory back to the operating system.
//!
//! `kestrel` runs with glibc told never to trim its heap (the decode loop
//! reuses its buffers instead of faulting fresh pages in), so memory freed
//! after a burst of large requests would otherwise stay with the process
//! for good. glibc's `malloc_trim` returns the free pages of every arena.

/// Returns the heap's free pages to the system (glibc; elsewhere nothing).
pub fn release_freed() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only walks the allocator's own free lists, under
    // the allocator's locks; it touches no memory that Rust owns.
    unsafe {
        libc::malloc_trim(0);
    }
}
