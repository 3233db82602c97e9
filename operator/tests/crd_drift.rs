//! Fails when `crds/` differs from what the Rust types generate.

use std::path::PathBuf;

#[test]
fn crds_directory_matches_the_generated_crds() {
    let directory = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../crds");
    let mut expected_files: Vec<String> = Vec::new();
    for (file_name, crd) in saint_operator::crd::all_crds() {
        expected_files.push(file_name.to_string());
        let path = directory.join(file_name);
        let on_disk = std::fs::read_to_string(&path).unwrap_or_default();
        assert!(
            on_disk == saint_operator::crd::crd_yaml(&crd),
            "{} is out of date with the CRD types; regenerate with \
             `cargo run -p saint-operator --bin crdgen -- crds` from the repository root",
            path.display()
        );
    }
    let mut found: Vec<String> = std::fs::read_dir(&directory)
        .expect("crds/ exists")
        .map(|entry| {
            entry
                .expect("readable entry")
                .file_name()
                .to_string_lossy()
                .into_owned()
        })
        .filter(|name| {
            std::path::Path::new(name)
                .extension()
                .is_some_and(|extension| extension.eq_ignore_ascii_case("yaml"))
        })
        .collect();
    found.sort();
    expected_files.sort();
    assert_eq!(
        found, expected_files,
        "crds/ holds files crdgen does not write; delete them"
    );
}
