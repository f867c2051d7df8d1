//! Cgroups as groups: a process's cgroup v2 path, and the systemd unit or container it
//! belongs to.
use super::trace::{Process, Shared, Trace};

/// What a process's cgroup is called in a report: its path under the cgroup2 mount, `?`
/// when the kernel gave no id (no cgroup v2 hierarchy, a recording made before schema 5, or
/// one before schema 6 for a process seen only at its exit),
/// and `cgroup ID` when the id was never named (the cgroup was created and removed between
/// two of forkprof's looks at the hierarchy).
pub fn label(trace: &Trace, p: &Process) -> Shared {
    match p.cgroup_id() {
        0 => Shared::from(&b"?"[..]),
        id => trace
            .cgroup_path(id)
            .cloned()
            .unwrap_or_else(|| Shared::from(format!("cgroup {id}").as_bytes())),
    }
}

/// Container ids are shown by their first 12 hex digits, as docker does.
const SHORT_ID: usize = 12;

fn is_container_id(s: &str) -> bool {
    s.len() >= 32 && s.bytes().all(|b| b.is_ascii_hexdigit())
}

/// The systemd unit or container a cgroup path belongs to:
/// - a container's scope (`docker-ID.scope`, `cri-containerd-ID.scope`, `crio-ID.scope`,
///   `libpod-ID.scope`) or cgroupfs directory (`/docker/ID`, `/kubepods/.../ID`): the id's
///   first 12 hex digits;
/// - else the innermost `.service` or `.scope` (`nginx.service`, `session-3.scope`);
/// - else the path itself (`/`, `/user.slice`, a hand-made group).
pub fn unit_of(path: &str) -> String {
    let parts: Vec<&str> = path.split('/').filter(|p| !p.is_empty()).collect();
    for part in parts.iter().rev() {
        if let Some(stem) = part.strip_suffix(".scope") {
            let id = stem.rsplit('-').next().unwrap_or(stem);
            if is_container_id(id) {
                return id[..SHORT_ID].to_string();
            }
        }
        if is_container_id(part) {
            return part[..SHORT_ID].to_string();
        }
    }
    parts
        .iter()
        .rev()
        .find(|p| p.ends_with(".service") || p.ends_with(".scope"))
        .map_or_else(|| path.to_string(), |p| p.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    const ID: &str = "4f3c2a1b0e9d8c7b6a5f4e3d2c1b0a99887766554433221100ffeeddccbbaa00";

    #[test]
    fn units_and_containers() {
        assert_eq!(unit_of("/system.slice/nginx.service"), "nginx.service");
        assert_eq!(
            unit_of("/user.slice/user-1000.slice/session-3.scope"),
            "session-3.scope"
        );
        assert_eq!(
            unit_of(&format!("/system.slice/docker-{ID}.scope")),
            "4f3c2a1b0e9d"
        );
        assert_eq!(
            unit_of(&format!(
                "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1.slice/cri-containerd-{ID}.scope"
            )),
            "4f3c2a1b0e9d"
        );
        assert_eq!(unit_of(&format!("/docker/{ID}")), "4f3c2a1b0e9d");
        // A service's own subgroups count as the service.
        assert_eq!(
            unit_of("/system.slice/ci-runner.service/job-7"),
            "ci-runner.service"
        );
        assert_eq!(unit_of("/"), "/");
        assert_eq!(unit_of("/user.slice"), "/user.slice");
        assert_eq!(unit_of("/forkprof-test/a"), "/forkprof-test/a");
        // Not an id: too short, or not hex.
        assert_eq!(unit_of("/x/docker-abc.scope"), "docker-abc.scope");
    }
}
