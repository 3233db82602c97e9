//! `cliport-proxy`: symlink it under a CLI's name in the sandbox; see `porter::proxy`.

fn main() {
    std::process::exit(porter::proxy::main());
}
