//! The single-file spill of earlier versions, taken over at open.

use std::fs::{self, File};
use std::io::{self, BufRead, BufReader};
use std::path::Path;

use crate::state::private::{sync_dir, write_atomically};
use crate::state::record::WriteRecord;

use super::SegmentId;

/// Files of the single-file spill of earlier versions, each moved by one atomic step:
/// `spill.jsonl` and `spill.loaded.*.jsonl` (never sent) become segments of incarnation 0,
/// replayed first; `spill.inflight.*.jsonl` (a replay that may have been sent) becomes
/// `unknown.replay-interrupted.*.jsonl` with every row marked unknown (written whole
/// before the input is removed; a restart that finds both only removes the input).
pub(super) fn migrate_legacy(dir: &Path) -> io::Result<()> {
    let mut names: Vec<String> = fs::read_dir(dir)?
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| {
            n == "spill.jsonl" || n.starts_with("spill.loaded.") || n.starts_with("spill.inflight.")
        })
        .collect();
    names.sort();
    for (index, name) in names.iter().enumerate() {
        let path = dir.join(name);
        if let Some(tag) = name.strip_prefix("spill.inflight.") {
            let target = dir.join(format!("unknown.replay-interrupted.{tag}"));
            if !target.exists() {
                let mut out = Vec::new();
                for line in BufReader::new(File::open(&path)?).lines() {
                    let line = line?;
                    match serde_json::from_str::<WriteRecord>(&line) {
                        Ok(mut record) => {
                            record.outcome = crate::state::record::RecordOutcome::Unknown;
                            record.error = Some(crate::state::record::ErrorInfo {
                                kind: "replay_interrupted".into(),
                                text: "an earlier version stopped while these replayed rows were being sent; they may or may not have been applied".into(),
                            });
                            serde_json::to_writer(&mut out, &record).map_err(io::Error::other)?;
                        }
                        Err(_) => out.extend_from_slice(line.as_bytes()),
                    }
                    out.push(b'\n');
                }
                write_atomically(dir, &target, &out)?;
            }
            fs::remove_file(&path)?;
        } else {
            let id = SegmentId::live(0, index as u64);
            fs::rename(&path, dir.join(id.file_name()))?;
        }
    }
    if !names.is_empty() {
        sync_dir(dir)?;
    }
    Ok(())
}
