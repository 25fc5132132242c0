use super::*;

// What a resume reads from the disk (issue 36): resume files and segments, any bytes or a
// real file damaged, are refused with a message or decode; nothing panics. A longer run:
// `PROPTEST_CASES=100000 cargo test --release -p libomptarget-plugin journal::tests::fuzz`.
proptest::proptest! {
    #[test]
    fn fuzz_resume_files_and_segments_are_refused_or_read(
        bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..512),
        flips in proptest::collection::vec((proptest::prelude::any::<usize>(), proptest::prelude::any::<u8>()), 0..4),
    ) {
        let _ = ResumeFile::decode(&bytes);
        let _ = Segment::decode(Path::new("segment-1.bin"), &bytes);
        let file = ResumeFile {
            format: RESUME_FORMAT.into(),
            checkpoint: 3,
            argv: vec!["prog".into()],
            exe: "xxh3:0".into(),
            at_micros: 5,
            regions: 9,
            segments: vec![SegmentRef { file: "segment-3-0".into(), bytes: 10, checksum: "xxh3:1".into(), entries: 1 }],
            buffers: vec![Keyed { region: 1, addr: 0x1000, size: 8, key: 4 }],
            checksum: String::new(),
        };
        let mut b = file.encode();
        proptest::prop_assert!(ResumeFile::decode(&b).is_ok());
        let changed = !flips.is_empty();
        for (at, x) in flips {
            let n = b.len();
            b[at % n] ^= x | 1;
        }
        // A damaged file is never trusted (its checksum covers it).
        if changed {
            if let Ok(f) = ResumeFile::decode(&b) {
                proptest::prop_assert_eq!(f.checkpoint, 3);
            }
        }
    }
}

/// A real segment.
fn segment_bytes() -> Vec<u8> {
    let task = TaskEntry { key: 42, kernel: "k".into(), writes: vec![(0x1000, Some(vec![0x2000])), (0x3000, None)], output: b"hi\n".to_vec(), errors: vec![], kernel_s: 0.1 };
    let entries = [Entry::Task(task), Entry::Retrieve { key: 9, bytes: vec![1, 2, 3] }];
    SegmentOut { ckpt: 3, entries: &entries }.encode().unwrap()
}

proptest::proptest! {
    // A segment damaged anywhere (its checksum in the resume file aside): refused with a
    // message or read, never a panic.
    #[test]
    fn fuzz_damaged_segments_are_refused_or_read(
        flips in proptest::collection::vec((proptest::prelude::any::<usize>(), proptest::prelude::any::<u8>()), 0..6),
        cut in proptest::prelude::any::<usize>(),
    ) {
        let mut b = segment_bytes();
        for (at, x) in flips {
            let n = b.len();
            b[at % n] ^= x;
        }
        let keep = cut % (b.len() + 1);
        for bytes in [&b[..], &b[..keep]] {
            if let Err(e) = Segment::decode(Path::new("segment-3.bin"), bytes) {
                proptest::prop_assert!(e.contains("segment-3.bin"), "{}", e);
            }
        }
    }
}

#[test]
fn a_segment_reads_back() {
    let seg = Segment::decode(Path::new("segment-3.bin"), &segment_bytes()).unwrap();
    assert_eq!(seg.entries.len(), 2);
    assert!(matches!(&seg.entries[0], Entry::Task(t) if t.key == 42 && t.output == b"hi\n" && t.writes[1] == (0x3000, None)));
    assert!(matches!(&seg.entries[1], Entry::Retrieve { key: 9, bytes } if bytes == &[1, 2, 3]));
}

/// A segment as bincode 1 wrote it (format 1: the builds before this one) is refused, not
/// misread; so is one of a later format, or anything else.
#[test]
fn a_segment_of_bincode_1_or_another_format_is_refused() {
    // SegmentOut { format: 1, ckpt: 3, entries: [Entry::Retrieve { key: 9, bytes: [1, 2, 3] }] }
    // with bincode 1's defaults: fixed-size little-endian integers, u64 lengths, u32
    // variant numbers.
    #[rustfmt::skip]
    let old: &[u8] = &[
        1, 0, 0, 0,                 // format 1
        3, 0, 0, 0, 0, 0, 0, 0,     // ckpt
        1, 0, 0, 0, 0, 0, 0, 0,     // one entry
        1, 0, 0, 0,                 // Entry::Retrieve
        9, 0, 0, 0, 0, 0, 0, 0,     // key
        3, 0, 0, 0, 0, 0, 0, 0, 1, 2, 3,
    ];
    let e = Segment::decode(Path::new("/ck/resume/segment-3.bin"), old).err().unwrap();
    assert_eq!(
        e,
        "the log segment /ck/resume/segment-3.bin has no format header: it is in format 1 (bincode), written by a build before format headers; this build reads format 2"
    );
    let mut later = segment_bytes();
    later[8..12].copy_from_slice(&3u32.to_le_bytes());
    let e = Segment::decode(Path::new("segment-3.bin"), &later).err().unwrap();
    assert_eq!(e, "the log segment segment-3.bin is in format 3, written by another build of the runtime; this build reads format 2");
    for junk in [&b""[..], b"ompc-lo", b"{\"format\": 2}", &[0u8; 64]] {
        let e = Segment::decode(Path::new("segment-3.bin"), junk).err().unwrap();
        assert!(e.contains("no format header") && e.contains("reads format 2"), "{e}");
    }
    // Trailing bytes are damage.
    let mut long = segment_bytes();
    long.push(0);
    assert!(Segment::decode(Path::new("s"), &long).err().unwrap().contains("1 bytes after its end"));
}

#[test]
fn keys_name_contents_not_order() {
    let a = key::submit(key::zero(64), 0, &[1; 64]);
    assert_eq!(a, key::submit(key::zero(64), 0, &[1; 64]));
    assert_ne!(a, key::submit(key::zero(64), 0, &[2; 64]));
    assert_ne!(a, key::submit(key::zero(64), 8, &[1; 64]));
    let mut r1 = [(0x10, a), (0x20, 7)];
    let mut r2 = [(0x20, 7), (0x10, a)];
    assert_eq!(key::task(1, "k", &[3], &mut r1), key::task(1, "k", &[3], &mut r2));
    assert_ne!(key::task(1, "k", &[3], &mut r1), key::task(2, "k", &[3], &mut r2));
    assert_ne!(key::task(1, "k", &[3], &mut r1), key::task(1, "k", &[4], &mut r2));
    assert_ne!(key::fresh(), key::fresh());
}

/// Publish checkpoint 1 in `dir` with its log (two entries, and one after the cut).
fn publish_one(dir: &Path) {
    let j = Journal::new(dir, true).unwrap();
    let task = TaskEntry { key: 42, kernel: "k".into(), writes: vec![(0x1000, Some(vec![]))], output: b"hi\n".to_vec(), errors: vec![], kernel_s: 0.1 };
    j.push(Entry::Task(task));
    j.push(Entry::Retrieve { key: 9, bytes: vec![1, 2, 3] });
    j.cut(1, 0.5, 1, vec![(7, 0x1000, 16, 42)]);
    j.push(Entry::Retrieve { key: 10, bytes: vec![4] });
    j.write(1, [7u64].into_iter(), 2).unwrap();
    // A manifest for checkpoint 1 listing region 7.
    let mut map = ckpt_veloc::CheckpointMap::new();
    let data = vec![5u8; 16];
    std::fs::create_dir_all(dir.join("ckpt-1")).unwrap();
    std::fs::write(dir.join("ckpt-1/rank-1.data"), &data).unwrap();
    map.record([ckpt_veloc::RegionRecord {
        region: 7,
        ckpt: 1,
        rank: 1,
        size: 16,
        checksum: ckpt_veloc::Checksum::of(&data),
        file: "ckpt-1/rank-1.data".into(),
        offset: 0,
        saved_unix_ms: 0,
    }]);
    map.publish(dir, 1, std::num::NonZeroUsize::new(2).unwrap()).unwrap();
}

/// The log an older build left (resume file format 1, its segment bincode 1's) is refused
/// with a message naming the file and both formats (the resume then runs from the start,
/// `cluster/resume.rs`); so is a resume file of this format naming such a segment.
#[test]
fn a_log_an_older_build_left_is_refused_naming_both_formats() {
    let t = tempfile::tempdir().unwrap();
    let dir = t.path();
    publish_one(dir);
    let rf = dir.join(LOG_DIR).join("resume-1.json");
    let good = String::from_utf8(std::fs::read(&rf).unwrap()).unwrap();
    let old = good.replacen(RESUME_FORMAT, "ompcluster-resume/1", 1);
    std::fs::write(&rf, &old).unwrap();
    let e = Loaded::read(dir).err().unwrap();
    assert_eq!(
        e,
        format!(
            "the log of checkpoint 1 ({}) is in format ompcluster-resume/1, written by another build of the runtime; this build reads format ompcluster-resume/2",
            rf.display()
        )
    );
    std::fs::write(&rf, good.replacen(&format!("\"format\": \"{RESUME_FORMAT}\",\n"), "", 1)).unwrap();
    let e = Loaded::read(dir).err().unwrap();
    assert!(e.ends_with("has no format field; this build reads format ompcluster-resume/2"), "{e}");
    // A resume file of this format whose segment (checksum and all) is bincode 1's.
    #[rustfmt::skip]
    let bincode: &[u8] = &[1, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 9, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 4];
    let seg = dir.join(LOG_DIR).join("segment-1.bin");
    std::fs::write(&seg, bincode).unwrap();
    let mut f = ResumeFile::decode(good.as_bytes()).unwrap();
    f.segments[0].bytes = bincode.len() as u64;
    f.segments[0].checksum = checksum(bincode);
    f.segments[0].entries = 1;
    std::fs::write(&rf, f.encode()).unwrap();
    let e = Loaded::read(dir).err().unwrap();
    assert!(e.contains("segment-1.bin has no format header: it is in format 1 (bincode)") && e.ends_with("this build reads format 2"), "{e}");
}

#[test]
fn a_published_log_reads_back_and_damage_is_caught() {
    let t = tempfile::tempdir().unwrap();
    let dir = t.path();
    publish_one(dir);
    let l = Loaded::read(dir).unwrap();
    assert_eq!((l.checkpoint, l.tasks.len(), l.retrieves.len()), (1, 1, 1), "the entry after the cut is not in checkpoint 1's log");
    assert_eq!(l.tasks[&42].output, b"hi\n");
    assert_eq!(l.by_addr[&0x1000].key, 42);
    assert!(!l.other_argv && !l.other_exe);
    // Damage in the resume file is caught, even where the JSON still parses.
    let rf = dir.join(LOG_DIR).join("resume-1.json");
    let good = std::fs::read(&rf).unwrap();
    let text = String::from_utf8(good.clone()).unwrap().replacen("\"addr\": 4096", "\"addr\": 4097", 1);
    assert_ne!(text.as_bytes(), &good[..]);
    std::fs::write(&rf, text).unwrap();
    let e = Loaded::read(dir).err().unwrap();
    assert!(e.contains("checksum differs"), "{e}");
    std::fs::write(&rf, &good).unwrap();
    assert!(Loaded::read(dir).is_ok());
    // Damage in the segment is caught.
    let seg = dir.join(LOG_DIR).join("segment-1.bin");
    let mut b = std::fs::read(&seg).unwrap();
    let mid = b.len() / 2;
    b[mid] ^= 0xff;
    std::fs::write(&seg, &b).unwrap();
    let e = Loaded::read(dir).err().unwrap();
    assert!(e.contains("damaged"), "{e}");
    // A missing log too.
    std::fs::remove_dir_all(dir.join(LOG_DIR)).unwrap();
    let e = Loaded::read(dir).err().unwrap();
    assert!(e.contains("cannot be read"), "{e}");
}
