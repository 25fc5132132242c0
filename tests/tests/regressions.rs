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
