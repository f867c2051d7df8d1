//! What each iteration of the bench loop runs (`--workload`). The first two are spawns and
//! nothing else: forkprof's worst case, where all that an iteration does is what forkprof
//! traces. The other two are work as its users run it, where spawning is one cost among
//! others: a rebuild of a small C project with make, and a configure-like shell script.
//! Their files are written under the bench directory (`target/bench`) before the runs.
use std::fmt::Write as _;
use std::fs;
use std::path::Path;

use anyhow::{Context, Result};

/// What each iteration of the loop does.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub(super) enum Workload {
    /// fork + exec of a dynamically linked `int main(){return 0;}` + waitpid
    ForkExec,
    /// vfork + _exit(0) + waitpid: the cheapest spawn there is
    VforkExit,
    /// `make -B -j<CPUs>` of a generated C project (32 small files and a main): gcc, cc1
    /// and as per file, then the link, as a build spawns them (about 100 processes)
    Make,
    /// a configure-like shell script: command substitutions, pipes, and short runs of sed,
    /// grep, expr, basename, uname and cat (about 280 processes)
    Shell,
}

/// The C files of the `make` workload's project, besides main.c.
const MAKE_FILES: u32 = 32;

/// Rounds of the `shell` workload's loop (each about 7 processes).
const SHELL_ROUNDS: u32 = 40;

impl Workload {
    pub(super) fn describe(self) -> &'static str {
        match self {
            Workload::ForkExec => "fork+exec+wait of a dynamically linked `int main(){return 0;}`",
            Workload::VforkExit => "vfork+_exit+wait (no exec)",
            Workload::Make => "a rebuild of a 33-file C project (make -B -j<CPUs>)",
            Workload::Shell => "a configure-like shell script (about 280 processes)",
        }
    }

    /// `--iterations` when not given: runs of a second or a few for each workload on the
    /// machines of BENCHMARKS.md.
    pub(super) fn default_iterations(self) -> u32 {
        match self {
            Workload::ForkExec | Workload::VforkExit => 2000,
            Workload::Make => 3,
            Workload::Shell => 10,
        }
    }

    /// The program the loop execs in each iteration, where the workload is one written by
    /// `write`: its file name in the bench directory.
    pub(super) fn script(self) -> Option<&'static str> {
        match self {
            Workload::ForkExec | Workload::VforkExit => None,
            Workload::Make => Some("make_build"),
            Workload::Shell => Some("shell_script"),
        }
    }

    /// The Debian packages the workload runs, besides gcc, which the loop needs anyway.
    pub(super) fn packages(self) -> &'static [&'static str] {
        match self {
            Workload::Make => &["make"],
            Workload::ForkExec | Workload::VforkExit | Workload::Shell => &[],
        }
    }
}

/// Writes what `workload` runs into `dir` (the bench directory), `jobs` being make's `-j`:
/// for `make` the project and the script that rebuilds it, for `shell` the script and the
/// file it reads. Nothing for the others.
pub(super) fn write(workload: Workload, dir: &Path, jobs: usize) -> Result<()> {
    let text = match workload {
        Workload::ForkExec | Workload::VforkExit => return Ok(()),
        Workload::Make => {
            let project = dir.join("make-project");
            // A fresh project: no object of an earlier one left to link.
            let _ = fs::remove_dir_all(&project);
            fs::create_dir_all(&project)
                .with_context(|| format!("cannot create {}", project.display()))?;
            for (name, text) in make_project() {
                write_file(&project.join(name), &text, false)?;
            }
            make_build(&project, jobs)
        }
        Workload::Shell => {
            let input = dir.join("shell-input.txt");
            write_file(&input, SHELL_INPUT, false)?;
            shell_script(&input)
        }
    };
    // Every workload that reaches here has a script: `script` names it.
    let script = workload
        .script()
        .context("a written workload has no script name")?;
    write_file(&dir.join(script), &text, true)
}

fn write_file(path: &Path, text: &str, executable: bool) -> Result<()> {
    use std::os::unix::fs::PermissionsExt as _;
    fs::write(path, text).with_context(|| format!("cannot write {}", path.display()))?;
    if executable {
        fs::set_permissions(path, fs::Permissions::from_mode(0o755))
            .with_context(|| format!("cannot make {} executable", path.display()))?;
    }
    Ok(())
}

/// The `make` workload's project: (file name, text). Each file includes a few libc headers
/// and formats a string, so that cc1's time per file is a small real file's, not an empty
/// one's.
fn make_project() -> Vec<(String, String)> {
    let mut files = Vec::new();
    let mut main = String::from("#include <stdio.h>\n\n");
    for i in 1..=MAKE_FILES {
        let _ = writeln!(main, "int part{i}(const char *);");
        files.push((
            format!("part{i}.c"),
            format!(
                "#include <stdio.h>\n#include <stdlib.h>\n#include <string.h>\n\n\
                 struct record{i} {{\n\tchar name[32];\n\tint n;\n}};\n\n\
                 int part{i}(const char *s)\n{{\n\tstruct record{i} r;\n\
                 \tsnprintf(r.name, sizeof r.name, \"%s-{i}\", s);\n\
                 \tint len = (int)strlen(r.name);\n\
                 \tr.n = len;\n\
                 \tfor (int k = 0; k < len; k++)\n\t\tr.n += r.name[k] % 7 == 0;\n\
                 \treturn r.n;\n}}\n"
            ),
        ));
    }
    main.push_str("\nint main(void)\n{\n\tint total = 0;\n");
    for i in 1..=MAKE_FILES {
        let _ = writeln!(main, "\ttotal += part{i}(\"x\");");
    }
    main.push_str("\tprintf(\"%d\\n\", total);\n\treturn 0;\n}\n");
    files.push(("main.c".to_owned(), main));
    files.push((
        "Makefile".to_owned(),
        "SRCS := $(sort $(wildcard *.c))\nOBJS := $(SRCS:.c=.o)\n\n\
         prog: $(OBJS)\n\t$(CC) -o $@ $(OBJS)\n\n\
         %.o: %.c\n\t$(CC) -O2 -Wall -c -o $@ $<\n"
            .to_owned(),
    ));
    files
}

/// The `make` workload's iteration: the whole project rebuilt (`-B`), its output out of the
/// loop's stdout, which the bench parses.
fn make_build(project: &Path, jobs: usize) -> String {
    format!(
        "#!/bin/sh\n\
         # One iteration of `cargo xtask bench --workload make` (written by the bench).\n\
         exec make -s -B -j{jobs} -C '{}' >/dev/null\n",
        project.display()
    )
}

/// What the `shell` workload's greps and cats read.
const SHELL_INPUT: &str = "alpha\nbeta\ngamma\n";

/// The `shell` workload's iteration, in the idioms of configure scripts: a command
/// substitution per value, a pipe into sed, a test by grep, arithmetic by expr. It exits
/// non-zero, and the loop with it, if a command it needs fails.
fn shell_script(input: &Path) -> String {
    format!(
        "#!/bin/sh\n\
         # One iteration of `cargo xtask bench --workload shell` (written by the bench).\n\
         set -e\n\
         in='{}'\n\
         i=0\n\
         while [ \"$i\" -lt {SHELL_ROUNDS} ]; do\n\
         \tv=$(echo \"$i\" | sed 's/1/one/g')\n\
         \tgrep -q beta \"$in\"\n\
         \tn=$(expr \"$i\" + 1)\n\
         \tcase $v in\n\
         \t*one*) w=$(basename \"/usr/lib/lib$v.so\") ;;\n\
         \t*) w=$(uname -m) ;;\n\
         \tesac\n\
         \ttest -n \"$w\"\n\
         \tcat \"$in\" >/dev/null\n\
         \ti=$n\n\
         done\n",
        input.display()
    )
}

#[cfg(test)]
mod tests {
    use std::process::Command;

    use super::*;

    fn scratch(name: &str) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!(
            "forkprof-xtask-workload-{name}-{}",
            std::process::id()
        ));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn only_the_written_workloads_have_a_script_and_each_its_iterations() {
        assert_eq!(Workload::ForkExec.script(), None);
        assert_eq!(Workload::VforkExit.script(), None);
        assert_eq!(Workload::Make.script(), Some("make_build"));
        assert_eq!(Workload::Shell.script(), Some("shell_script"));
        assert_eq!(Workload::ForkExec.default_iterations(), 2000);
        assert_eq!(Workload::Make.default_iterations(), 3);
        let dir = scratch("none");
        write(Workload::ForkExec, &dir, 2).unwrap();
        assert_eq!(fs::read_dir(&dir).unwrap().count(), 0);
        let _ = fs::remove_dir_all(&dir);
    }

    /// The project builds, its program runs, and an iteration prints nothing on stdout,
    /// where the loop prints its result. Needs gcc and make (`cargo xtask setup`).
    #[test]
    fn the_make_workload_rebuilds_its_project_and_prints_nothing() {
        let dir = scratch("make");
        write(Workload::Make, &dir, 2).unwrap();
        let project = dir.join("make-project");
        let c_files = fs::read_dir(&project)
            .unwrap()
            .filter(|e| e.as_ref().unwrap().path().extension() == Some("c".as_ref()))
            .count();
        assert_eq!(c_files, MAKE_FILES as usize + 1);
        for _ in 0..2 {
            let out = Command::new(dir.join("make_build")).output().unwrap();
            assert!(out.status.success(), "{out:?}");
            assert!(out.stdout.is_empty(), "{out:?}");
            assert!(out.stderr.is_empty(), "warnings: {out:?}");
        }
        let run = Command::new(project.join("prog")).output().unwrap();
        assert!(run.status.success());
        let total: u32 = String::from_utf8(run.stdout)
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        assert!(total >= 3 * MAKE_FILES, "{total}");
        let _ = fs::remove_dir_all(&dir);
    }

    #[test]
    fn the_shell_workload_runs_quietly_and_fails_without_its_input() {
        let dir = scratch("shell");
        write(Workload::Shell, &dir, 2).unwrap();
        let out = Command::new(dir.join("shell_script")).output().unwrap();
        assert!(out.status.success(), "{out:?}");
        assert!(out.stdout.is_empty() && out.stderr.is_empty(), "{out:?}");
        // A failed command ends the iteration with a failure, which the loop reports.
        fs::remove_file(dir.join("shell-input.txt")).unwrap();
        let out = Command::new(dir.join("shell_script")).output().unwrap();
        assert!(!out.status.success(), "{out:?}");
        let _ = fs::remove_dir_all(&dir);
    }
}
