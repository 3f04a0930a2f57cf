//! Replays every checked-in corpus file (fuzz/corpus/<target>/, seeds and minimized
//! crashes) through its target on stable: the workspace suite, and so CI, re-checks every
//! property on every input libFuzzer ever kept, in seconds.

use std::path::PathBuf;

fn corpus_dir(target: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../fuzz/corpus")
        .join(target)
}

#[test]
fn every_target_has_a_seed_corpus_and_every_file_keeps_its_property() {
    for (name, target) in capgate_fuzz::TARGETS {
        let dir = corpus_dir(name);
        let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
            .map(|e| e.expect("corpus entry").path())
            .filter(|p| p.is_file())
            .collect();
        files.sort();
        assert!(
            !files.is_empty(),
            "{name}: empty corpus in {}",
            dir.display()
        );
        for f in &files {
            let data = std::fs::read(f).unwrap_or_else(|e| panic!("{}: {e}", f.display()));
            let outcome = std::panic::catch_unwind(|| target(&data));
            assert!(
                outcome.is_ok(),
                "{name}: {} breaks the property",
                f.display()
            );
        }
        println!("{name}: {} files replayed", files.len());
    }
}
