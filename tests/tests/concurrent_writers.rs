//! Regions running at the same time that write one buffer (issue 10, item 1): under the stock
//! plugin they share one device memory, and the result is one that some order of the regions
//! could give. Each program is run several times with 1, 2 and 3 workers (and round robin,
//! which spreads concurrent regions over the workers), to catch races.

use ompcluster_tests::{assert_pass, compile, describe, run, run_with_report, stdout, NPS};

const RR: (&str, &str) = ("OMPCLUSTER_SCHEDULER", "roundrobin");

/// Run `prog args` `times` times with each worker count and with round robin on 2 and 3
/// workers; every run must print PASS and exit 0.
fn check_repeated(src: &str, configs: &[&[&str]], times: usize) {
    let prog = compile(src);
    let mut failed = Vec::new();
    let mut runs = 0;
    for args in configs {
        for _ in 0..times {
            for (np, envs) in NPS.iter().map(|&np| (np, vec![])).chain([(3, vec![RR]), (4, vec![RR])]) {
                runs += 1;
                let o = run(np, &prog, args, &envs);
                if !(o.status.success() && stdout(&o).contains("PASS")) {
                    failed.push(format!("=== {src} {args:?} -np {np} {envs:?}\n{}", describe(&o)));
                }
            }
        }
    }
    assert!(failed.is_empty(), "{} of {runs} runs failed\n{}", failed.len(), failed.join("\n"));
}

/// The program: 16 regions each write their own slice of one buffer and take a ticket
/// with an atomic capture (the same bytes), as `target` and as `target teams distribute
/// parallel for`; other sizes too (one element per region, many regions, big slices).
#[test]
fn regions_writing_one_buffer_at_the_same_time() {
    check_repeated("shared_writers.c", &[&["64", "16", "3", "0"], &["64", "16", "3", "1"], &["1", "64", "2", "0"], &["4000", "8", "2", "1"]], 2);
}

/// Regions whose kernel wrote a buffer in none of its earlier runs write it at the same time
/// on different workers: different bytes are merged, the same bytes (a shared counter) make one
/// region run again over the other's change.
#[test]
fn late_writers_are_merged_or_run_again() {
    check_repeated("late_writers.c", &[&["12", "100", "3", "0"], &["12", "100", "3", "1"], &["40", "1", "2", "1"]], 2);
}

/// Two regions at a time, with round robin on 2 workers: the first ones that write `hits` and
/// `out` run on different workers, the first to finish is recorded, and the other's changes
/// (other bytes of both buffers) are merged into it (the report counts the merges).
#[test]
fn disjoint_late_changes_are_merged() {
    let prog = compile("late_writers.c");
    for _ in 0..3 {
        let (o, report) = run_with_report(3, &prog, &["2", "100", "3", "0"], &[RR]);
        assert_pass(&o);
        assert!(report.merges >= 2, "expected the changes to both buffers merged, report {report:?}\n{}", describe(&o));
    }
}
