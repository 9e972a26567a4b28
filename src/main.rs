//! The `retrysim` command line: explain one decision, run and trace named
//! scenarios, compare policies, hunt for invariant violations. The commands
//! live in the library (feature `cli`); this crate holds only the allocator.

/// A simulation allocates and frees for every request it simulates; see the
/// `mimalloc` line in Cargo.toml. The library leaves the allocator to you.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    retrysim::cli_main()
}
