//! Unit tests of the buffer record.

use super::*;
use task_graph::Access;

#[test]
fn bytes_sent_back_belong_to_one_version_and_to_a_budget() {
    let mut bs = Buffers::new(0x10_0000, 1 << 30);
    let a = bs.create(100, 0).unwrap().addr;
    let v = bs.new_version(a, [1].into()).unwrap();
    assert!(bs.set_sent_back(a, v, vec![7; 100]));
    assert_eq!(bs.sent_back_bytes, 100);
    // A newer version (here a submit from the head) drops them.
    bs.new_version(a, [HEAD].into());
    assert!(bs.get(a).unwrap().sent_back.is_none());
    assert_eq!(bs.sent_back_bytes, 0);
    // Over the budget they are not held; a deleted buffer's are released.
    let big = bs.create(SENT_BACK_BUDGET, 0).unwrap().addr;
    assert!(bs.set_sent_back(big, 1, vec![0; SENT_BACK_BUDGET as usize]));
    assert!(!bs.set_sent_back(a, 2, vec![1; 100]));
    assert!(bs.remove(big).unwrap().sent_back.is_none());
    assert_eq!(bs.sent_back_bytes, 0);
    assert!(bs.set_sent_back(a, 2, vec![1; 100]));
    assert_eq!(bs.take_sent_back(a).map(|(v, b)| (v, b.len())), Some((2, 100)));
    assert_eq!(bs.sent_back_bytes, 0);
}

#[test]
fn versions_holders_and_stale_copies() {
    let mut bs = Buffers::new(0x10_0000, 1 << 24);
    bs.set_retention_budget(1 << 20);
    let a = bs.create(100, 0).unwrap().addr;
    let id = bs.get(a).unwrap().id;
    // Submitted (staged on the head), moved to worker 1, then a kernel on 1 changes it.
    assert_eq!(bs.new_version(a, [HEAD].into()), Some(1));
    bs.add_holder(a, 1);
    assert_eq!(bs.new_version(a, [1].into()), Some(2));
    let b = bs.get(a).unwrap();
    assert_eq!(b.version_on(HEAD), Some(1));
    assert_eq!(b.version_on(1), Some(2));
    assert_eq!(b.ranks_with(1).collect::<Vec<_>>(), vec![HEAD]);
    assert_eq!(bs.retained_bytes(), 4096);
    // Worker 1 dies: version 2 is lost, version 1 survives on the head.
    let lost = bs.forget_ranks(&[1].into());
    assert_eq!(lost, [Access { buffer: id, version: 2 }].into());
    // Recovery rebuilds version 2 on worker 2 and installs version 1 there first.
    bs.install(id, 2, 1);
    assert_eq!(bs.get(a).unwrap().version_on(2), Some(1));
    bs.install(id, 2, 2);
    assert_eq!(bs.get(a).unwrap().holders, [2].into());
    // A whole submit staged on the head again: no stale head copy any more.
    bs.new_version(a, [HEAD].into());
    assert_eq!(bs.retained_bytes(), 0);
    assert_eq!(bs.get(a).unwrap().stale.get(&2), Some(&2));
    // Over the budget, the head's old copy is not kept.
    bs.set_retention_budget(0);
    bs.new_version(a, [2].into());
    assert_eq!(bs.get(a).unwrap().version_on(HEAD), None);
    assert_eq!(bs.retained_bytes(), 0);
    // Retired: found by id, released once no task reads it.
    bs.set_retention_budget(1 << 20);
    let b = bs.remove(a).unwrap();
    bs.retire(b);
    assert!(bs.by_id(id).is_some() && bs.get(a).is_none());
    assert_eq!(bs.retained_bytes(), 4096);
    // A transfer into a retired buffer's copy that failed half-way: that copy is unknown.
    bs.install(id, 3, 1);
    assert_eq!(bs.by_id(id).unwrap().version_on(3), Some(1));
    bs.drop_copy(a, 3);
    assert_eq!(bs.by_id(id).unwrap().version_on(3), None);
    assert!(bs.release_retired(&[id].into()).is_empty());
    assert_eq!(bs.release_retired(&BTreeSet::new()).len(), 1);
    assert_eq!(bs.retained_bytes(), 0);
    // Kept versions count against the budget, and go once nothing reads them.
    let v = |version| task_graph::Access { buffer: id, version };
    assert!(bs.keep(v(1), Arc::new(vec![7; 1000])));
    assert!(!bs.keep(v(2), Arc::new(vec![7; 1 << 20])), "over the budget");
    assert_eq!((bs.retained_bytes(), bs.kept(v(1)).map(|b| b.len())), (1000, Some(1000)));
    bs.release_kept(|a| a == v(1));
    assert_eq!(bs.retained_bytes(), 1000);
    bs.release_kept(|_| false);
    assert_eq!((bs.retained_bytes(), bs.kept(v(1))), (0, None));
}

#[test]
fn reachability_follows_pointers_and_globals() {
    let mut bs = Buffers::new(0x10_0000, 1 << 20);
    let a = bs.create(100, 0x7000_0100).unwrap().addr;
    let b = bs.create(5000, 0).unwrap().addr;
    let c = bs.create(8, 0).unwrap().addr;
    let img = bs.reserve_image(3 * 4096).unwrap();
    let g = bs.add_image_data(img + 2 * 4096, 40, 7).addr;
    let lone = bs.create(4, 0).unwrap().addr;
    // a holds a pointer into the middle of b; b points to c.
    bs.get_mut(a).unwrap().points_to.add(PointsTo::Some([b + 4100].into()));
    bs.get_mut(b).unwrap().points_to.add(PointsTo::Some([c].into()));
    assert_eq!(bs.reachable(&[a + 8, 12345], &[], 0), vec![a, b, c]);
    assert_eq!(bs.reachable(&[c], &[], 7), vec![c, g]);
    // A global inside the image's data is a partial range of that buffer.
    assert_eq!(bs.containing_range(g + 16, 8).map(|x| x.addr), Some(g));
    // A pointer 0x100 bytes before a's host start, translated the same way, is a's.
    assert_eq!(bs.reachable(&[], &[(a - 0x100, 0x7000_0000)], 0), vec![a, b, c]);
    assert!(bs.reachable(&[], &[(a - 0x100, 0x7000_0001)], 0).is_empty());
    bs.remove(a);
    assert!(bs.reachable(&[], &[(a - 0x100, 0x7000_0000)], 0).is_empty());
    bs.get_mut(c).unwrap().points_to.add(PointsTo::All);
    assert_eq!(bs.reachable(&[c], &[], 0).len(), 4);
    assert!(bs.containing(lone + 4096).is_none());
    // A value just before `b` (in its guard gap; `a` before it was removed above) reaches b,
    // and one past the end of the last buffer reaches that buffer.
    assert_eq!(bs.near(b - 2).collect::<Vec<_>>(), vec![b]);
    assert_eq!(bs.near(lone + 4096).collect::<Vec<_>>(), vec![lone]);
    assert_eq!(bs.near(b + 4096).collect::<Vec<_>>(), vec![b]);
    assert_eq!(bs.containing_range(b + 4000, 1000).map(|x| x.addr), Some(b));
    assert!(bs.containing_range(b + 8000, 1000).is_none());
    // A block device code allocated: tracked where the worker put it, never over a buffer.
    let block = 0x8_0000;
    assert_eq!(bs.adopt(block, 32, 4096, 2).map(|x| (x.size, x.span, x.arena_of)), Some((32, 4096, Some(2))));
    assert!(bs.adopt(block, 8, 4096, 2).is_none(), "overlaps");
    assert!(bs.adopt(block + 100, 8, 4096, 2).is_none(), "not a page");
    assert_eq!(bs.near(block + 16).collect::<Vec<_>>(), vec![block]);
    // Deleted while a region may reach it: no new region finds it.
    bs.doom(block);
    assert!(bs.near(block + 16).next().is_none());
    assert!(bs.get(block).is_some_and(|x| x.deleted));
}

#[test]
fn a_copy_moved_while_a_kernel_on_its_source_changed_it_holds_no_version() {
    let mut bs = Buffers::new(0x10_0000, 1 << 24);
    let a = bs.create(100, 0).unwrap().addr;
    bs.new_version(a, [1].into());
    let start = |bs: &Buffers| bs.get(a).unwrap().copy_state(1);
    // Nothing runs on worker 1 while its copy moves to worker 2: 2 holds the version.
    let before = start(&bs);
    assert_eq!(bs.move_done(a, 2, 1, 1, before, true), Moved::Holds);
    assert_eq!(bs.get(a).unwrap().holders, [1, 2].into());
    // The move to worker 3 starts; then a kernel is placed on worker 1 (its EXECUTE may
    // reach 1 before the move's request) and changes the copy before the move is done.
    let before = start(&bs);
    bs.get_mut(a).unwrap().begin_use(1);
    assert!(bs.kernel_done(a, 1, true, true).is_empty(), "no copy taken from 1 is known yet");
    assert_eq!(bs.move_done(a, 3, 1, 1, before, true), Moved::Touched);
    let b = bs.get(a).unwrap();
    assert!(!b.holders.contains(&3) && b.version_on(3).is_none(), "3 may hold part of the change");
    // The same, with the kernel still running when the move is done: 3 holds the version
    // until the kernel changes the buffer, and is no clean source meanwhile.
    let before = start(&bs);
    bs.get_mut(a).unwrap().begin_use(1);
    assert_eq!(bs.move_done(a, 3, 1, 1, before, true), Moved::Holds);
    assert!(bs.get(a).unwrap().holders.contains(&3) && !bs.get(a).unwrap().clean_copy(3, 1));
    assert_eq!(bs.kernel_done(a, 1, true, true), vec![3]);
    assert_eq!(bs.get(a).unwrap().version_on(3), None);
    // A kernel placed meanwhile that changed nothing leaves the copy exact.
    let before = start(&bs);
    bs.get_mut(a).unwrap().begin_use(1);
    assert!(bs.kernel_done(a, 1, false, true).is_empty());
    assert_eq!(bs.move_done(a, 3, 1, 1, before, true), Moved::Holds);
    assert!(bs.get(a).unwrap().clean_copy(3, 1));
    // A kernel placed on worker 1 (it may reach the copy), while a kernel elsewhere that
    // changed its own copy ends (a replica settling on worker 5): 1's bytes are as they were.
    let before = start(&bs);
    bs.get_mut(a).unwrap().begin_use(1);
    bs.get_mut(a).unwrap().begin_use(5);
    assert!(bs.kernel_done(a, 5, true, true).is_empty());
    assert_eq!(bs.move_done(a, 3, 1, 1, before, true), Moved::Holds);
    assert!(bs.get(a).unwrap().holders.contains(&3) && !bs.get(a).unwrap().clean_copy(3, 1));
    assert!(bs.kernel_done(a, 1, false, true).is_empty());
    assert!(bs.get(a).unwrap().clean_copy(3, 1));
    // A newer version made meanwhile (by a kernel elsewhere): the copy is of no version.
    let before = start(&bs);
    bs.new_version(a, [2].into());
    assert_eq!(bs.move_done(a, 4, 1, 1, before, true), Moved::Superseded);
    assert_eq!(bs.get(a).unwrap().version_on(4), None);
    // A move that did not arrive whole holds nothing.
    let before = bs.get(a).unwrap().copy_state(2);
    assert_eq!(bs.move_done(a, 4, 2, 2, before, false), Moved::Failed);
    assert_eq!(bs.get(a).unwrap().version_on(4), None);
}

#[test]
fn a_copy_moved_over_an_older_version_no_longer_holds_that_version() {
    // Worker 2 holds version 1; worker 1 makes version 2: 2's copy is a source of version 1
    // for recovery.
    let mut bs = Buffers::new(0x10_0000, 1 << 24);
    let a = bs.create(100, 0).unwrap().addr;
    bs.new_version(a, [2].into());
    bs.new_version(a, [1].into());
    assert_eq!(bs.get(a).unwrap().version_on(2), Some(1));
    // Version 2 moves from 1 into 2's copy, and a kernel placed on 1 meanwhile changes it
    // (the Cholesky example, a worker killed: the copy then held neither version, and
    // recovery re-ran a task on it as version 1).
    let before = bs.get(a).unwrap().copy_state(1);
    bs.get_mut(a).unwrap().begin_move_into(2, false);
    assert_eq!(bs.get(a).unwrap().version_on(2), None, "being overwritten: no version");
    assert!(bs.get(a).unwrap().ranks_with(1).next().is_none());
    bs.get_mut(a).unwrap().begin_use(1);
    bs.kernel_done(a, 1, true, true);
    assert_eq!(bs.move_done(a, 2, 1, 2, before, true), Moved::Touched);
    assert_eq!(bs.get(a).unwrap().version_on(2), None);
    // A move that arrived whole and clean makes it a holder of the current version.
    let before = bs.get(a).unwrap().copy_state(1);
    bs.get_mut(a).unwrap().begin_move_into(3, false);
    assert_eq!(bs.move_done(a, 3, 1, 2, before, true), Moved::Holds);
    assert_eq!(bs.get(a).unwrap().version_on(3), Some(2));
}

#[test]
fn a_pointer_member_stays_attached_when_its_struct_is_sent_again() {
    let mut bs = Buffers::new(0x10_0000, 1 << 24);
    let heap = 0x10_0000..0x10_0000 + (1 << 24);
    let s = bs.create(16, 0).unwrap().addr;
    let host_ptr: u64 = 0x5555_0000_1000;
    let dev_ptr: u64 = 0x10_8000;
    let strukt = |n: u32, p: u64| [n.to_ne_bytes().to_vec(), vec![0; 4], p.to_ne_bytes().to_vec()].concat();
    // The struct, then libomptarget's shadow pointer over its member (held `host_ptr`).
    assert_eq!(bs.attach(s, &strukt(10, host_ptr), heap.clone(), None, false), None);
    assert_eq!(bs.attach(s + 8, &dev_ptr.to_ne_bytes(), heap.clone(), Some(host_ptr), false), None);
    // Sent again as it is on the host: the device pointer goes instead.
    assert_eq!(bs.attach(s, &strukt(11, host_ptr), heap.clone(), None, false), Some(strukt(11, dev_ptr)));
    // A part not covering the member: untouched.
    assert_eq!(bs.attach(s, &11u32.to_ne_bytes(), heap.clone(), None, false), None);
    // The program points the member elsewhere: the attachment ends, the bytes go as they are.
    assert_eq!(bs.attach(s, &strukt(11, 0x5555_0000_2000), heap.clone(), None, false), None);
    assert_eq!(bs.attach(s, &strukt(11, host_ptr), heap.clone(), None, false), None);
    // An 8-byte write of a heap address over a slot that held another heap address (or whose
    // old value is unknown) attaches nothing.
    assert_eq!(bs.attach(s + 8, &dev_ptr.to_ne_bytes(), heap.clone(), Some(0x10_9000), false), None);
    assert_eq!(bs.attach(s, &strukt(11, host_ptr), heap.clone(), None, false), None);
    assert_eq!(bs.attach(s + 8, &dev_ptr.to_ne_bytes(), heap.clone(), None, false), None);
    assert_eq!(bs.attach(s, &strukt(11, host_ptr), heap.clone(), None, false), None);
    // A member attached before its fresh struct's bytes are sent (a mapper's `alloc` member):
    // the host pointer those bytes bring is learnt, and the device pointer goes instead, then
    // and later.
    let t = bs.create(32, 0).unwrap().addr;
    let with_w = |p: u64| [vec![0u8; 24], p.to_ne_bytes().to_vec()].concat();
    assert_eq!(bs.attach(t + 24, &dev_ptr.to_ne_bytes(), heap.clone(), None, true), None);
    assert_eq!(bs.attach(t, &with_w(host_ptr), heap.clone(), None, false), Some(with_w(dev_ptr)));
    assert_eq!(bs.attach(t, &with_w(host_ptr), heap.clone(), None, false), Some(with_w(dev_ptr)));
    // Into a buffer already written, an unknown old value attaches nothing.
    let u = bs.create(32, 0).unwrap().addr;
    assert_eq!(bs.attach(u + 24, &dev_ptr.to_ne_bytes(), heap.clone(), None, false), None);
    assert_eq!(bs.attach(u, &with_w(host_ptr), heap, None, false), None);
}

#[test]
fn a_struct_mapped_again_after_part_of_it_was_unmapped_gets_its_pointers_attached() {
    let base = 0x10_0000;
    let mut bs = Buffers::new(base, 1 << 24);
    let heap = base..base + (1 << 24);
    let host_s: u64 = 0x7ffe_0000_1000;
    let (host_b, host_c) = (0x5555_0000_1000u64, 0x5555_0000_9000u64);
    // The pointees, mapped (libomptarget translates host_b to dev_b).
    let dev_b = bs.create(64, host_b).unwrap().addr;
    let dev_c = bs.create(64, host_c).unwrap().addr;
    let strukt = |b: u64, c: u64| [vec![0u8; 8], b.to_ne_bytes().to_vec(), c.to_ne_bytes().to_vec()].concat();
    // The struct, sent, then both members attached.
    let s = bs.create(24, host_s).unwrap().addr;
    assert_eq!(bs.attach(s, &strukt(host_b, host_c), heap.clone(), None, true), None);
    bs.new_version(s, [1].into());
    assert_eq!(bs.attach(s + 8, &dev_b.to_ne_bytes(), heap.clone(), Some(host_b), false), None);
    assert_eq!(bs.attach(s + 16, &dev_c.to_ne_bytes(), heap.clone(), Some(host_c), false), None);
    // The struct deleted; c's pointee unmapped as well, b's stays.
    bs.remove(s).unwrap();
    let c = bs.remove(dev_c).unwrap();
    assert_eq!(c.addr, dev_c);
    // A new device copy of the struct, from the same host address: b is attached again, c
    // (whose pointee libomptarget maps anew and attaches itself) is not.
    let s2 = bs.create(24, host_s).unwrap().addr;
    assert_eq!(bs.attach(s2, &strukt(host_b, host_c), heap.clone(), None, true), Some(strukt(dev_b, host_c)));
    // ... and stays attached when the struct is sent again.
    bs.new_version(s2, [1].into());
    assert_eq!(bs.attach(s2, &strukt(host_b, host_c), heap.clone(), None, false), Some(strukt(dev_b, host_c)));
    // Another struct at that host address later, whose member holds something else: as sent.
    bs.remove(s2).unwrap();
    let s3 = bs.create(24, host_s).unwrap().addr;
    assert_eq!(bs.attach(s3, &strukt(0x5555_0000_5000, host_c), heap.clone(), None, true), None);
    // The record of that slot went with the struct that brought something else: nothing
    // for the next one.
    bs.remove(s3).unwrap();
    let s4 = bs.create(24, host_s).unwrap().addr;
    assert_eq!(bs.attach(s4, &strukt(host_b, host_c), heap, None, true), None);
}

#[test]
fn a_doomed_struct_removed_late_does_not_bring_back_attachments_a_new_struct_used() {
    let base = 0x10_0000;
    let mut bs = Buffers::new(base, 1 << 24);
    let heap = base..base + (1 << 24);
    let (host_s, host_b) = (0x7ffe_0000_1000u64, 0x5555_0000_1000u64);
    let dev_b = bs.create(64, host_b).unwrap().addr;
    let strukt = |b: u64| [vec![0u8; 8], b.to_ne_bytes().to_vec()].concat();
    let s = bs.create(16, host_s).unwrap().addr;
    assert_eq!(bs.attach(s, &strukt(host_b), heap.clone(), None, true), None);
    bs.new_version(s, [1].into());
    assert_eq!(bs.attach(s + 8, &dev_b.to_ne_bytes(), heap.clone(), Some(host_b), false), None);
    // The program deletes the struct while a region in flight still reaches it: doomed, not
    // removed. Its attachment is remembered now.
    bs.doom(s);
    // A new struct at the same host address takes the attachment, then points its member
    // elsewhere: the attachment ends.
    let s2 = bs.create(16, host_s).unwrap().addr;
    assert_ne!(s2, s);
    assert_eq!(bs.attach(s2, &strukt(host_b), heap.clone(), None, true), Some(strukt(dev_b)));
    bs.new_version(s2, [1].into());
    assert_eq!(bs.attach(s2, &strukt(0x5555_0000_5000), heap.clone(), None, false), None);
    bs.remove(s2).unwrap();
    // The region in flight ends: the doomed struct goes, and does not remember its
    // attachment a second time.
    bs.remove(s).unwrap();
    let s3 = bs.create(16, host_s).unwrap().addr;
    assert_eq!(bs.attach(s3, &strukt(host_b), heap, None, true), None);
}

#[test]
fn a_copy_on_its_way_is_shareable_once_there() {
    let mut bs = Buffers::new(0x10_0000, 1 << 24);
    let a = bs.create(100, 0).unwrap().addr;
    // Submitted (on the head), then on its way to worker 1 for a region placed there.
    bs.new_version(a, [HEAD].into());
    let b = bs.get_mut(a).unwrap();
    b.begin_use(1);
    b.incoming.insert(1);
    let live = |_: i32| true;
    assert!(!b.shareable_on(1, live) && b.shareable_once_on(1, live));
    // Held by 1 and the head: shareable now.
    b.incoming.remove(&1);
    b.holders.insert(1);
    assert!(b.shareable_on(1, live));
    // Its other holder down: forgetting 1's copy would lose the version.
    assert!(!b.shareable_once_on(1, |r| r != HEAD));
    // A kernel executing on an older copy on 2, a copy on 2 taken from one in use, a region
    // in flight that may write it: never shareable there, arrived or not.
    b.running.insert(2, 1);
    assert!(!b.shareable_once_on(2, live));
    b.running.clear();
    b.torn.insert(2, 1);
    assert!(!b.shareable_once_on(2, live));
    b.torn.clear();
    b.writing = Some((1, 1));
    assert!(!b.shareable_once_on(2, live) && !b.shareable_on(1, live));
    b.writing = None;
    // Version 0 counts as held everywhere: zeros on their way over an undone run's changes
    // are no copy to share, nor one a region would wait for.
    let z = bs.create(100, 0).unwrap().addr;
    let b = bs.get_mut(z).unwrap();
    assert!(b.shareable_once_on(3, live));
    b.incoming.insert(3);
    assert!(!b.shareable_once_on(3, live) && !b.shareable_on(3, live));
}

#[test]
fn a_copy_taken_from_a_torn_copy_goes_with_it() {
    // Worker 1's copy is in use (a kernel expected to read it); worker 2 takes it, and is
    // put to use too; worker 3 takes 2's. The kernel on 1 changes it: 2 and 3 may both hold
    // part of the change.
    let mut bs = Buffers::new(0x10_0000, 1 << 24);
    let a = bs.create(100, 0).unwrap().addr;
    bs.new_version(a, [1].into());
    bs.get_mut(a).unwrap().begin_use(1);
    let before = bs.get(a).unwrap().copy_state(1);
    assert_eq!(bs.move_done(a, 2, 1, 1, before, true), Moved::Holds);
    bs.get_mut(a).unwrap().begin_use(2);
    let before = bs.get(a).unwrap().copy_state(2);
    assert_eq!(bs.move_done(a, 3, 2, 1, before, true), Moved::Holds);
    assert_eq!(bs.kernel_done(a, 1, true, true), vec![2, 3]);
    assert_eq!(bs.get(a).unwrap().holders, [1].into());
    // The same, with the kernel on 1 ending while 2's copy is on its way to 3: the copy
    // that arrives was taken from a copy forgotten meanwhile.
    bs.new_version(a, [1].into());
    bs.get_mut(a).unwrap().begin_use(1);
    let before = bs.get(a).unwrap().copy_state(1);
    assert_eq!(bs.move_done(a, 2, 1, 2, before, true), Moved::Holds);
    let before = bs.get(a).unwrap().copy_state(2);
    assert_eq!(bs.kernel_done(a, 1, true, true), vec![2]);
    assert_eq!(bs.move_done(a, 3, 2, 2, before, true), Moved::Touched);
    assert_eq!(bs.get(a).unwrap().version_on(3), None);
}

#[test]
fn a_staged_move_keeps_the_older_version_until_its_bytes_are_written() {
    // Worker 2 holds version 1; worker 1 makes version 2, which moves into 2's copy staged
    // (received aside). Its source dies half-way: 2 wrote nothing and still holds version 1,
    // even though a kernel on 1 could reach the source (a failed move is not torn).
    let mut bs = Buffers::new(0x10_0000, 1 << 24);
    let a = bs.create(100, 0).unwrap().addr;
    bs.new_version(a, [2].into());
    bs.new_version(a, [1].into());
    bs.get_mut(a).unwrap().begin_use(1);
    let before = bs.get(a).unwrap().copy_state(1);
    bs.get_mut(a).unwrap().begin_move_into(2, true);
    assert_eq!(bs.get(a).unwrap().version_on(2), Some(1), "nothing written yet");
    assert_eq!(bs.move_done(a, 2, 1, 2, before, false), Moved::Failed);
    assert_eq!(bs.get(a).unwrap().version_on(2), Some(1));
    assert!(!bs.get(a).unwrap().torn.contains_key(&2));
    // Staged again, and it arrives, but a kernel on 1 changed the source meanwhile: the
    // bytes were written, so 2 holds neither version.
    let before = bs.get(a).unwrap().copy_state(1);
    bs.get_mut(a).unwrap().begin_move_into(2, true);
    bs.kernel_done(a, 1, true, true);
    assert_eq!(bs.move_done(a, 2, 1, 2, before, true), Moved::Touched);
    assert_eq!(bs.get(a).unwrap().version_on(2), None);
}

/// A voided ballot's change of a copy another kernel shared names the copy's worker once no
/// kernel uses the copy, if nothing that may be a region's own write (a kernel's change its
/// region took, a write from the head) landed there since the voided run started; not if
/// something did, and never before the copy is free.
#[test]
fn a_change_no_region_made_names_its_worker_once_the_copy_is_free() {
    let mut bs = Buffers::new(0x10_0000, 1 << 24);
    let a = bs.create(100, 0).unwrap().addr;
    bs.new_version(a, [1, 2].into());
    let suspect = |bs: &mut Buffers| {
        let b = bs.get_mut(a).unwrap();
        // The voided replica and another region's kernel use worker 1's copy.
        b.begin_use(1);
        b.begin_use(1);
        let since = b.possible_writes_on(1);
        b.suspect(1, Suspect { kernel: "k".into(), majority: vec![2, 3], since });
    };
    // The co-user changed nothing: once both ended, 1 is named, once.
    suspect(&mut bs);
    bs.kernel_done(a, 1, true, false);
    assert!(bs.take_blames().is_empty(), "the co-user still uses the copy");
    bs.kernel_done(a, 1, false, false);
    let blames = bs.take_blames();
    assert_eq!(blames.iter().map(|b| (b.rank, b.addr, b.suspect.majority.clone())).collect::<Vec<_>>(), vec![(1, a, vec![2, 3])]);
    assert!(bs.get(a).unwrap().suspects.is_empty());
    // The co-user changed the copy and its region took that change: it may be its write.
    suspect(&mut bs);
    bs.kernel_done(a, 1, true, false);
    bs.kernel_done(a, 1, true, true);
    assert!(bs.take_blames().is_empty());
    // The co-user failed: what it wrote is unknown, so it counts as a possible write.
    suspect(&mut bs);
    bs.kernel_done(a, 1, true, false);
    bs.kernel_done(a, 1, false, true);
    assert!(bs.take_blames().is_empty());
    // The head wrote the copy meanwhile (a submit): no blame either.
    suspect(&mut bs);
    bs.get_mut(a).unwrap().possibly_written(1);
    bs.kernel_done(a, 1, true, false);
    bs.kernel_done(a, 1, false, false);
    assert!(bs.take_blames().is_empty());
    // Two suspects of one copy: the later-started one is kept (it has seen the fewest
    // possible writes), and the worker is named once.
    suspect(&mut bs);
    bs.get_mut(a).unwrap().possibly_written(1);
    let b = bs.get_mut(a).unwrap();
    b.begin_use(1);
    let since = b.possible_writes_on(1);
    b.suspect(1, Suspect { kernel: "later".into(), majority: vec![2, 3], since });
    for _ in 0..3 {
        bs.kernel_done(a, 1, true, false);
    }
    assert_eq!(bs.take_blames().iter().map(|b| b.suspect.kernel.to_string()).collect::<Vec<_>>(), ["later"]);
    // A worker that died takes its suspects and its blames with it.
    suspect(&mut bs);
    bs.kernel_done(a, 1, true, false);
    bs.kernel_done(a, 1, false, false);
    bs.forget_ranks(&[1].into());
    assert!(bs.take_blames().is_empty());
    suspect(&mut bs);
    bs.forget_ranks(&[1].into());
    assert!(bs.get(a).unwrap().suspects.is_empty());
}
