/// Every exported function's body is one call of the boundary, under its own name (the
/// name the message of an internal error gives).
#[test]
fn every_export_runs_behind_the_guard() {
    let src = include_str!("../abi.rs");
    let mut n = 0;
    for (at, _) in src.match_indices("extern \"C\" fn __tgt_rtl_") {
        let name = &src[at + "extern \"C\" fn __tgt_rtl_".len()..];
        let name = &name[..name.find('(').unwrap()];
        let body = &src[at..];
        let body = &body[body.find(") -> ").unwrap()..];
        let body = &body[body.find("{\n").unwrap() + 2..body.find("\n}\n").unwrap()];
        let first = body.lines().map(str::trim).find(|l| !l.starts_with("const ") && !l.starts_with("//")).unwrap();
        let guarded = first.starts_with(&format!("guard(\"{name}\", ")) || first.starts_with(&format!("guard_traced(\"{name}\", "));
        assert!(guarded, "__tgt_rtl_{name} does not start with its guard: {first}");
        n += 1;
    }
    assert_eq!(n, 23, "exported functions");
}

#[test]
fn a_panic_message_is_its_text() {
    let p = std::panic::catch_unwind(|| panic!("bad {}", 7)).unwrap_err();
    assert_eq!(ft_handler::panic_message(&*p), "bad 7");
    let p = std::panic::catch_unwind(|| panic!("plain")).unwrap_err();
    assert_eq!(ft_handler::panic_message(&*p), "plain");
    let p = std::panic::catch_unwind(|| std::panic::panic_any(3u8)).unwrap_err();
    assert_eq!(ft_handler::panic_message(&*p), "a panic without a message");
}
