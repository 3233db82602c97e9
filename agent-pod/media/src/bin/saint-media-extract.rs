//! The extraction child on its own, for this crate's tests and benchmark; the agent
//! runs the same code as `saint-agent extract-document`.

fn main() -> std::process::ExitCode {
    saint_media::child_main()
}
