//! What the driver's test files share.

/// The first of `n` consecutive free ports on 127.0.0.1 (binding clients use PORT + i). Taken
/// below the system's ephemeral range (32768 and up), where a busy test machine's outgoing and
/// TIME_WAIT connections leave few runs of free neighbours.
pub fn free_ports(n: u16) -> u16 {
    let mut x = std::process::id() as u64 ^ msgbench_core::clock::now_ns();
    for _ in 0..1000 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let p = 20_000 + (x % 10_000) as u16;
        let all: Result<Vec<_>, _> = (0..n)
            .map(|i| std::net::TcpListener::bind(("127.0.0.1", p + i)))
            .collect();
        if all.is_ok() {
            return p;
        }
    }
    panic!("no {n} consecutive free ports on 127.0.0.1 between 20000 and 30015");
}
