//! Writes the bot file's JSON Schema to `agent-pod/config/bot-config.schema.json`, the
//! copy shipped in the repository (a test fails when it is stale).

fn main() -> std::io::Result<()> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("bot-config.schema.json");
    std::fs::write(&path, saint_config::bot_file::schema_text())?;
    println!("wrote {}", path.display());
    Ok(())
}
