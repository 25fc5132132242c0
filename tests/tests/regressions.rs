//! Minimal reproducers of bugs the feature tests found, one program each, so that a failure
//! names its cause.

use ompcluster_tests::check_program;

/// `map(tofrom: p[1000:1000])`: libomptarget passes the kernel `p` (begin of the mapped data
/// minus 4000 bytes), an address before the device buffer.
#[test]
fn section_not_starting_at_zero() {
    check_program("repro_section_offset.c", &[], &[]);
}

/// Concurrent `nowait` regions writing disjoint elements of one resident buffer: legal
/// OpenMP (no two regions touch the same element), but with several workers each region runs
/// on its own copy of the whole buffer and the copies are not merged.
#[test]
fn concurrent_disjoint_writes_to_one_buffer() {
    check_program("repro_disjoint_writes.c", &[], &[]);
}

/// The device address of a declare-target global, taken in one region and dereferenced in the
/// next; round robin puts the second region on another worker.
#[test]
fn global_address_used_on_another_worker() {
    check_program("repro_global_address.c", &[], &[("OMPCLUSTER_SCHEDULER", "roundrobin")]);
}

/// Device variables without an offload entry (file-scope `static` in a declare-target block,
/// function-local `static`): 6 regions increment them; each worker keeps its own copy.
#[test]
fn device_statics_shared_by_successive_regions() {
    check_program("repro_device_statics.c", &[], &[("OMPCLUSTER_SCHEDULER", "roundrobin")]);
}

/// `use_device_addr(g)` of a declare-target global, dereferenced in a kernel (is_device_ptr).
#[test]
fn global_device_address_in_a_kernel() {
    check_program("repro_global_device_addr.c", &[], &[]);
}

/// More buffers mapped at once than the kernel allows memory mappings (each buffer a rank
/// holds is about two, with its guard gap): the job must end with a message that says so and
/// how to raise the limit, not with a bare "Cannot allocate memory". Below the limit, it runs.
#[test]
fn more_buffers_than_the_mapping_limit_are_refused_clearly() {
    use ompcluster_tests::{compile, describe, run_timeout, stderr, stdout};
    use std::time::Duration;
    let max: usize = std::fs::read_to_string("/proc/sys/vm/max_map_count").unwrap().trim().parse().unwrap();
    if max > 300_000 {
        eprintln!("skipped: vm.max_map_count is {max}; mapping that many buffers would take too long");
        return;
    }
    let prog = compile("many_buffers.c");
    let fits = (max / 4).to_string();
    let out = run_timeout(2, &prog, &[&fits], &[], Duration::from_secs(120));
    assert!(out.status.success() && stdout(&out).contains(&format!("mapped {fits}")), "{}", describe(&out));
    let too_many = (max * 2 / 3).to_string();
    let out = run_timeout(2, &prog, &[&too_many], &[], Duration::from_secs(120));
    assert!(!out.status.success(), "{}", describe(&out));
    assert!(stderr(&out).contains("too many device buffers held at once") && stderr(&out).contains("vm.max_map_count"), "{}", describe(&out));
}
