//! Property tests of the decoders that read what another rank sent (issue 36): any bytes,
//! and real messages damaged (bytes flipped, cut short, lengths inflated), either decode to a
//! message that [`Event::validate`] then accepts or refuses, or are refused with a named
//! error; nothing panics, and nothing allocates beyond [`MAX_CONTROL_BYTES`].
//!
//! A longer run: `PROPTEST_CASES=200000 cargo test --release -p event-system --test fuzz_decoders`.

use event_system::process::Victim;
use event_system::protocol::{decode, encode_into, Envelope, Event, FoundPointers, Region, Reply, StdStream, MAX_CONTROL_BYTES};
use proptest::prelude::*;

const HEAP: (u64, u64) = (0x1000_0000_0000, 0x1000_0000_0000 + (1 << 38));

fn region(addr: u64, size: u64) -> Region {
    Region { addr, size }
}

/// How many of [`samples`] are events (the rest are replies).
const EVENTS: usize = 14;

/// One real message of each kind, as the head and the workers send them.
fn samples() -> Vec<Vec<u8>> {
    let r = region(HEAP.0 + 0x2000, 4096);
    let events = vec![
        Event::LoadBinary { image: 1, size: 16384, base: HEAP.0, extent: 0x5000, kernels: vec!["__omp_offloading_fe00_1_main_l22".into(), "k2".into()] },
        Event::Alloc(r),
        Event::Submit { region: region(r.addr, 8), bytes: vec![7; 8] },
        Event::Retrieve(r),
        Event::ExchangeSend { region: r, peer: 2 },
        Event::Copy { src: r.addr, dst: r.addr + 4096, size: 64 },
        Event::Execute {
            image: 0,
            kernel: 3,
            args: vec![r.addr, 42],
            regions: vec![r, region(r.addr + 8192, 16)],
            assume_written: vec![true, false],
            short: false,
            replay: vec![region(HEAP.0 + 0x10_0000, 4096)],
            send_back: vec![false, true],
            streams: vec![(1, StdStream::Stdout)],
            digest: true,
            arena: Some(region(HEAP.0 + 0x20_0000, 0x10_0000)),
            flip: Some(3),
        },
        Event::Checkpoint { ckpt: 3, regions: vec![(1, r), (2, region(r.addr + 4096, 100))] },
        Event::Restore { region: r, record: b"{\"ckpt\":3}".to_vec() },
        Event::Fence { ranks: vec![2, 3], kill: vec![Victim { pid: 1234, start: 99 }] },
        Event::Failed { ranks: vec![1] },
        Event::Inject { signal: libc::SIGKILL, at_exit: false },
        Event::Sync,
        Event::Exit,
    ];
    assert_eq!(events.len(), EVENTS);
    let mut out: Vec<Vec<u8>> = events
        .into_iter()
        .map(|event| {
            let mut b = Vec::new();
            encode_into(&Envelope { tag: 7, event }, &mut b).unwrap();
            b
        })
        .collect();
    let replies = vec![
        Reply::Ok,
        Reply::Data(vec![1, 2, 3]),
        Reply::Executed {
            changed: vec![true, false],
            pointers: vec![FoundPointers::Some(vec![r.addr]), FoundPointers::Many],
            seconds: 0.25,
            patches: vec![(0, vec![(8, vec![1, 2])])],
            output: b"hello\n".to_vec(),
            errors: Vec::new(),
            allocated: Vec::new(),
            freed: vec![r.addr],
            returned: vec![0],
            digests: vec![7],
        },
        Reply::Flushed(vec![9; 20]),
        Reply::Error("no".into()),
        Reply::PeerDead(3),
    ];
    for reply in replies {
        let mut b = Vec::new();
        encode_into(&reply, &mut b).unwrap();
        out.push(b);
    }
    out
}

/// Decode `bytes` as everything a rank reads; validate what decodes.
fn read_all(bytes: &[u8]) {
    if let Ok(env) = decode::<Envelope>(bytes) {
        let _ = env.event.validate(HEAP.0, HEAP.1);
    }
    if let Ok(e) = decode::<Event>(bytes) {
        let _ = e.validate(HEAP.0, HEAP.1);
    }
    let _ = decode::<Reply>(bytes);
}

#[test]
fn every_sample_decodes_and_validates() {
    // The events first, then the replies. (A reply's bytes may also decode as some event,
    // which validation refuses, and the other way round: postcard has no type tags.)
    for (i, b) in samples().iter().enumerate() {
        if i < EVENTS {
            let env = decode::<Envelope>(b).unwrap_or_else(|e| panic!("event sample {i}: {e}"));
            env.event.validate(HEAP.0, HEAP.1).unwrap_or_else(|e| panic!("sample {i}: {e}"));
        } else {
            decode::<Reply>(b).unwrap_or_else(|e| panic!("reply sample {i}: {e}"));
        }
    }
}

/// `n` as a postcard varint (LEB128).
fn varint(mut n: u64) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        let b = (n & 0x7f) as u8;
        n >>= 7;
        if n == 0 {
            out.push(b);
            return out;
        }
        out.push(b | 0x80);
    }
}

#[test]
fn a_length_past_the_limit_is_refused_without_allocating_it() {
    // An Execute whose argument list claims u64::MAX / 2 elements: the tag (7, zigzag: 14),
    // the variant (9), image (0) and kernel (3) take a byte each; then the args' length.
    let mut b = samples()[6].clone();
    assert_eq!(b[..5], [14, 9, 0, 3, 2]);
    b.splice(4..5, varint(u64::MAX / 2));
    assert!(decode::<Envelope>(&b).is_err());
    // A length longer than any 64-bit varint.
    b.splice(4..14, [0xff; 11]);
    assert!(decode::<Envelope>(&b).is_err());
    const { assert!(MAX_CONTROL_BYTES < u64::MAX / 2) };
}

proptest! {
    #[test]
    fn any_bytes_are_refused_or_decoded_never_a_panic(bytes in proptest::collection::vec(any::<u8>(), 0..2048)) {
        read_all(&bytes);
    }

    #[test]
    fn damaged_messages_are_refused_or_decoded_never_a_panic(
        which in 0..20usize,
        flips in proptest::collection::vec((any::<usize>(), any::<u8>()), 0..6),
        cut in any::<usize>(),
        inflate in any::<(usize, u64)>(),
    ) {
        let all = samples();
        let mut b = all[which % all.len()].clone();
        for (at, x) in flips {
            let n = b.len();
            b[at % n] ^= x;
        }
        // A length made huge (any byte replaced by a varint, as postcard writes lengths).
        if !b.is_empty() {
            let at = inflate.0 % b.len();
            b.splice(at..at + 1, varint(inflate.1));
        }
        let keep = cut % (b.len() + 1);
        read_all(&b);
        read_all(&b[..keep]);
    }
}
