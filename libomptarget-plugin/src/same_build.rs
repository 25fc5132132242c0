//! Every rank runs the same build: the first exchange of a job, right after `MPI_Init` and
//! before any other message (`runtime::init`).
//!
//! Each rank gives [`WORDS`] 64-bit words to an `MPI_Allgather` on `MPI_COMM_WORLD`: a magic
//! number, [`PROTOCOL_VERSION`], the length of its build identifier
//! ([`BuildId::of_this_build`]: the GNU build-id of the loaded plugin) and the identifier's
//! bytes. This layout never changes, whatever the protocol becomes, so that any two builds
//! that have it can tell each other apart instead of misreading each other's messages. (Builds
//! older than protocol 2 do not take part: their first collective is the heap's agreement, and
//! such a mix ends at the start-up bound, `OMPCLUSTER_START_TIMEOUT`, or in an MPI error.)
//!
//! Every rank then compares every rank's claim with rank 0's. On any difference every rank
//! leaves at once (it did not wait for anything else: no hang), and rank 0 says which ranks
//! run which build (see [`check`]), through the launcher's start-up report.

use event_system::build_id::{BuildId, MAX_LEN};
use event_system::protocol::PROTOCOL_VERSION;

/// Words each rank gives to the exchange.
pub(crate) const WORDS: usize = 3 + MAX_LEN / 8;

/// The first word: "ompc-bid", so that a rank of something else is not taken for a build.
const MAGIC: u64 = u64::from_le_bytes(*b"ompc-bid");

/// What a rank says it runs.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Claim {
    /// A protocol version and a build.
    Build { protocol: u64, build: BuildId },
    /// Words that are no claim (not this exchange).
    Unknown,
}

impl Claim {
    /// This rank's claim, or (test only, `OMPCLUSTER_FT_INJECT=other_build:rank=R`) that of
    /// another build: the same protocol and this build's identifier with every bit flipped.
    pub(crate) fn mine(other_build: bool) -> Claim {
        let id = BuildId::of_this_build();
        let build = if other_build { BuildId::new(&id.as_bytes().iter().map(|b| !b).collect::<Vec<_>>()) } else { id };
        Claim::Build { protocol: u64::from(PROTOCOL_VERSION), build }
    }

    /// As words for the exchange.
    pub(crate) fn words(&self) -> [u64; WORDS] {
        let mut w = [0u64; WORDS];
        if let Claim::Build { protocol, build } = self {
            let bytes = build.as_bytes();
            w[0] = MAGIC;
            w[1] = *protocol;
            w[2] = bytes.len() as u64;
            let mut padded = [0u8; MAX_LEN];
            padded[..bytes.len()].copy_from_slice(bytes);
            for (i, c) in padded.chunks_exact(8).enumerate() {
                w[3 + i] = u64::from_le_bytes(c.try_into().expect("8 bytes"));
            }
        }
        w
    }

    /// From one rank's words.
    pub(crate) fn from_words(w: &[u64]) -> Claim {
        if w.len() != WORDS || w[0] != MAGIC || w[2] > MAX_LEN as u64 {
            return Claim::Unknown;
        }
        let bytes: Vec<u8> = w[3..].iter().flat_map(|x| x.to_le_bytes()).collect();
        Claim::Build { protocol: w[1], build: BuildId::new(&bytes[..w[2] as usize]) }
    }

    fn describe(&self) -> String {
        match self {
            Claim::Build { protocol, build } => format!("protocol {protocol}, build {build}"),
            Claim::Unknown => "no build identifier: a build before protocol 2, or not this runtime".into(),
        }
    }
}

/// Compare every rank's claim (`all`: the exchange's words, rank by rank) with rank 0's. On a
/// difference: the ranks that differ, and the report, one line per other build, e.g.
/// `ompcluster: rank 2 runs another build of the runtime (protocol 2, build 4f2a...) than rank 0
/// (protocol 2, build 9c1e...): install one build on every node`.
pub(crate) fn check(all: &[u64]) -> Result<(), (Vec<i32>, String)> {
    let claims: Vec<Claim> = all.chunks_exact(WORDS).map(Claim::from_words).collect();
    let Some(&first) = claims.first() else { return Ok(()) };
    let mut others: Vec<(Claim, Vec<i32>)> = Vec::new();
    for (rank, c) in claims.iter().enumerate().skip(1).filter(|(_, c)| **c != first) {
        match others.iter_mut().find(|(o, _)| o == c) {
            Some((_, ranks)) => ranks.push(rank as i32),
            None => others.push((*c, vec![rank as i32])),
        }
    }
    if others.is_empty() {
        return Ok(());
    }
    let mut report = String::new();
    for (c, ranks) in &others {
        let who = match &ranks[..] {
            [r] => format!("rank {r} runs"),
            _ => format!("ranks {} run", ranks.iter().map(|r| r.to_string()).collect::<Vec<_>>().join(", ")),
        };
        report.push_str(&format!(
            "ompcluster: {who} another build of the runtime ({}) than rank 0 ({}): install one build on every node\n",
            c.describe(),
            first.describe()
        ));
    }
    Err((others.into_iter().flat_map(|(_, r)| r).collect(), report))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(claims: &[Claim]) -> Vec<u64> {
        claims.iter().flat_map(|c| c.words()).collect()
    }

    #[test]
    fn claims_round_trip_through_words() {
        let me = Claim::mine(false);
        assert_eq!(Claim::from_words(&me.words()), me);
        let other = Claim::mine(true);
        assert_ne!(other, me);
        assert_eq!(Claim::from_words(&other.words()), other);
        assert_eq!(Claim::from_words(&[0; WORDS]), Claim::Unknown);
        let mut long = me.words();
        long[2] = 33;
        assert_eq!(Claim::from_words(&long), Claim::Unknown);
        assert_eq!(Claim::Unknown.words(), [0; WORDS]);
    }

    #[test]
    fn the_same_build_everywhere_passes() {
        let me = Claim::mine(false);
        assert!(check(&words(&[me, me, me, me])).is_ok());
        assert!(check(&[]).is_ok());
    }

    /// Another build is named with both protocol versions and both build ids; ranks of one
    /// other build share a line.
    #[test]
    fn another_build_is_named() {
        let id = |b: u8| BuildId::new(&[b; 20]);
        let a = Claim::Build { protocol: 2, build: id(0x9c) };
        let b = Claim::Build { protocol: 2, build: id(0x4f) };
        let c = Claim::Build { protocol: 3, build: id(0x11) };
        let (ranks, report) = check(&words(&[a, a, b, a])).unwrap_err();
        assert_eq!(ranks, [2]);
        assert_eq!(
            report,
            format!("ompcluster: rank 2 runs another build of the runtime (protocol 2, build {}) than rank 0 (protocol 2, build {}): install one build on every node\n", "4f".repeat(20), "9c".repeat(20))
        );
        let (ranks, report) = check(&words(&[a, b, c, b, Claim::Unknown])).unwrap_err();
        assert_eq!(ranks, [1, 3, 2, 4]);
        let lines: Vec<&str> = report.lines().collect();
        assert_eq!(lines.len(), 3, "{report}");
        assert!(lines[0].starts_with("ompcluster: ranks 1, 3 run another build of the runtime (protocol 2, build 4f4f"), "{report}");
        assert!(lines[1].starts_with("ompcluster: rank 2 runs another build of the runtime (protocol 3, build 1111"), "{report}");
        assert!(lines[2].contains("rank 4 runs another build of the runtime (no build identifier"), "{report}");
    }
}
