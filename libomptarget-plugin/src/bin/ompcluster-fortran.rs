//! `ompcluster-fortran`: the compiler for the cluster (see `ompcluster_plugin::wrapper`).

fn main() -> std::process::ExitCode {
    ompcluster_plugin::wrapper::main(ompcluster_plugin::wrapper::Lang::Fortran)
}
