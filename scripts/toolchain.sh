# Sourced by scripts/setup.sh, test.sh, demo.sh and test-veloc.sh: picks the Rust toolchain.
# The first `cargo` on the PATH if it is at least the workspace's rust-version, else Debian
# 12's own toolchain (`cargo-web` and `rustc-web`, /usr/bin/cargo and /usr/bin/rustc), which
# scripts/setup.sh installs with apt when no sufficient cargo is found.
# After `use_cargo`: CARGO_BIN names the cargo to run, and RUSTC, when set, the rustc it must use
# (Debian's cargo would otherwise take the first `rustc` on the PATH, maybe an older one).

MIN_RUST=$(sed -n 's/^rust-version *= *"\([0-9.]*\)".*/\1/p' "$(dirname "${BASH_SOURCE[0]}")/../Cargo.toml")

# cargo_at_least PATH: is the cargo at PATH at least MIN_RUST?
cargo_at_least() {
  local v
  v=$("$1" --version 2>/dev/null | awk '{print $2}') || return 1
  v=${v%%-*}
  [ -n "$v" ] && [ "$(printf '%s\n%s\n' "$MIN_RUST" "$v" | sort -V | head -1)" = "$MIN_RUST" ]
}

# find_cargo: prints the cargo to use, or fails.
find_cargo() {
  local c
  if c=$(command -v cargo) && cargo_at_least "$c"; then
    echo "$c"
  elif [ -x /usr/bin/cargo ] && [ -x /usr/bin/rustc ] && cargo_at_least /usr/bin/cargo; then
    echo /usr/bin/cargo
  else
    return 1
  fi
}

# use_cargo: sets CARGO_BIN (and RUSTC for Debian's toolchain), or stops with a message.
use_cargo() {
  if ! CARGO_BIN=$(find_cargo); then
    echo "no cargo >= $MIN_RUST found: run scripts/setup.sh (it installs Debian's rustc-web and cargo-web), or install Rust with rustup" >&2
    exit 1
  fi
  export CARGO_BIN
  if [ "$CARGO_BIN" = /usr/bin/cargo ] && [ "$(command -v cargo)" != /usr/bin/cargo ]; then
    export RUSTC=/usr/bin/rustc
  fi
}
