"""A real one-machine Slurm 22.05 with accounting, for the tests (tests/importers/test_slurm.py).

`SlurmBox(folder).start()` runs private daemons under `folder`, each on its own
free port and with its own munge key: munged, MariaDB, slurmdbd, slurmctld and
one slurmd per node (Debian's build has MULTIPLE_SLURMD). Nodes declare GPUs as
GRES of a named type (`gpu:h100:4`) backed by symlinks to /dev/null, since a
GPU line without `File=` is silently dropped in 22.05. Two partitions share
the nodes: `batch` and `urgent`, whose higher PriorityTier preempts batch jobs
(they are requeued). `stop()` ends every daemon it started, by process id.

`ensure_installed()` installs Debian's packages with apt-get when they are
missing and this process is root (a policy-rc.d that exits 101 keeps their
install scripts from starting the system services); it returns why it could
not, so the tests are skipped saying so. docs/slurm.md lists the settings
that matter and why (each one is a trap of 22.05 in a box like this).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

import debian_packages

PACKAGES = ("slurmctld", "slurmd", "slurmdbd", "slurm-client", "munge", "mariadb-server")
BINARIES = ("slurmctld", "slurmd", "slurmdbd", "sacct", "sacctmgr", "munged", "mariadbd", "mariadb-install-db")
CLUSTER = "testfleet"
ACCOUNTS = ("vision", "llm")
# name → (GPU type, GPUs)
NODES = {"gpu01": ("h100", 4), "gpu02": ("h100", 4), "gpu03": ("h100", 4), "gpu04": ("a100", 4)}
PARTITIONS = ("batch", "urgent")


def missing_binaries() -> list[str]:
    return [
        name for name in BINARIES if shutil.which(name, path=f"{os.environ.get('PATH', '')}:/usr/sbin:/sbin") is None
    ]


def ensure_installed() -> str | None:
    """None once the packages are installed, else why they cannot be."""
    return debian_packages.ensure_installed("Slurm", PACKAGES, missing_binaries)


def _free_ports(count: int) -> list[int]:
    sockets = [socket.socket() for _ in range(count)]
    try:
        for sock in sockets:
            sock.bind(("127.0.0.1", 0))
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


def _sbin(name: str) -> str:
    return shutil.which(name, path=f"{os.environ.get('PATH', '')}:/usr/sbin:/sbin")


class SlurmBox:
    def __init__(self, folder: Path):
        self.folder = Path(folder)
        self.conf = self.folder / "etc" / "slurm.conf"
        self.processes: list[subprocess.Popen] = []
        self.env = {**os.environ, "SLURM_CONF": str(self.conf), "TZ": "UTC"}

    # ---- running commands ---------------------------------------------------
    def run(self, *command: str, check: bool = True, timeout: float = 60) -> str:
        done = subprocess.run(command, env=self.env, capture_output=True, text=True, timeout=timeout)
        if check and done.returncode:
            raise RuntimeError(f"{' '.join(command)} exited {done.returncode}: {done.stderr.strip()}")
        return done.stdout

    def sbatch(self, *options: str, script: str = "sleep 1") -> str:
        """Submit a batch job; its id (as text)."""
        out = self.run(
            "sbatch", "--parsable", "--output=/dev/null", f"--chdir={self.folder}", *options, f"--wrap={script}"
        )
        return out.strip().split(";")[0]

    def release(self, job_id: str, attempt: int = 0) -> None:
        """Let a job submitted with `hold_script()` finish its `attempt` (0 first)."""
        (self.folder / "release" / f"{job_id}.{attempt}").touch()

    def hold_script(self, exit_code: int = 0) -> str:
        """A job script that runs until `release(job, attempt)` is called, then exits `exit_code`."""
        flag = f"{self.folder}/release/$SLURM_JOB_ID.${{SLURM_RESTART_COUNT:-0}}"
        return f"sleep 1; while [ ! -e {flag} ]; do sleep 0.2; done; exit {exit_code}"

    def state(self, job_id: str) -> str:
        """The job's current state (squeue, else the last accounting row)."""
        out = self.run("squeue", "-h", "-j", job_id, "-o", "%T", check=False).strip()
        if out:
            return out.splitlines()[0]
        rows = (
            self.run(
                "sacct", "-n", "-X", "-P", "-j", job_id, "-o", "State", "-S", "2020-01-01", "-E", "now", check=False
            )
            .strip()
            .splitlines()
        )
        return rows[-1].split()[0] if rows else "UNKNOWN"

    def wait_for(self, what, timeout: float = 60, every: float = 0.2, message: str = "") -> None:
        deadline = time.monotonic() + timeout
        while not what():
            if time.monotonic() > deadline:
                raise TimeoutError(message or f"gave up waiting after {timeout} s")
            time.sleep(every)

    def wait_state(self, job_id: str, *states: str, timeout: float = 60) -> None:
        self.wait_for(
            lambda: self.state(job_id) in states,
            timeout,
            message=f"job {job_id} never reached {states} (is {self.state(job_id)})",
        )

    # ---- starting and stopping ------------------------------------------------
    def start(self) -> SlurmBox:
        for sub in ("etc", "log", "run", "spool", "db", "munge", "release", "fakedev"):
            (self.folder / sub).mkdir(parents=True, exist_ok=True)
        os.chmod(self.folder / "munge", 0o700)
        ports = dict(zip(("mariadb", "dbd", "ctld", *NODES), _free_ports(3 + len(NODES))))
        for index in range(max(count for _, count in NODES.values())):
            link = self.folder / "fakedev" / f"nvidia{index}"
            if not link.exists():
                link.symlink_to("/dev/null")
        self._start_munge()
        self._start_mariadb(ports["mariadb"])
        self._write_configs(ports)
        self._spawn([_sbin("slurmdbd"), "-D"], "slurmdbd")
        self.wait_for(
            lambda: (
                subprocess.run(["sacctmgr", "-n", "list", "cluster"], env=self.env, capture_output=True).returncode == 0
            ),
            30,
            message="slurmdbd never answered",
        )
        self.run("sacctmgr", "-i", "add", "cluster", CLUSTER, check=False)  # exits 1 on a re-add ("Nothing new")
        for account in ACCOUNTS:
            self.run("sacctmgr", "-i", "add", "account", account, f"cluster={CLUSTER}", check=False)
        self.run(
            "sacctmgr", "-i", "add", "user", "root", f"account={','.join(ACCOUNTS)}", f"cluster={CLUSTER}", check=False
        )
        self._spawn([_sbin("slurmctld"), "-D", "-i"], "slurmctld")
        self.wait_for(
            lambda: (
                subprocess.run(["scontrol", "ping"], env=self.env, capture_output=True, text=True).stdout.count("UP")
                >= 1
            ),
            30,
            message="slurmctld never answered",
        )
        for node in NODES:
            self._spawn([_sbin("slurmd"), "-D", "-N", node], f"slurmd-{node}")
        self.wait_for(lambda: self._idle_nodes() == len(NODES), 60, every=0.3, message="not every node became idle")
        return self

    def _idle_nodes(self) -> int:
        out = self.run("sinfo", "-h", "-N", "-o", "%N %t", check=False)
        return len({line.split()[0] for line in out.splitlines() if line.split()[1:] == ["idle"]})

    def stop(self) -> None:
        for process in reversed(self.processes):
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for process in reversed(self.processes):
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        self.processes.clear()

    @contextlib.contextmanager
    def paused(self, daemon: str):
        """`daemon` (slurmdbd, slurmctld) stopped by SIGSTOP meanwhile: it accepts connections and never
        answers, as a wedged one does; SIGCONT after."""
        process = next(p for p in self.processes if Path(p.args[0]).name == daemon)
        process.send_signal(signal.SIGSTOP)
        try:
            yield
        finally:
            process.send_signal(signal.SIGCONT)

    def _spawn(self, command: list[str], name: str) -> subprocess.Popen:
        log = open(self.folder / "log" / f"{name}.out", "ab")
        process = subprocess.Popen(command, env=self.env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        log.close()
        self.processes.append(process)
        return process

    def _start_munge(self) -> None:
        key, munge = self.folder / "munge" / "munge.key", self.folder / "munge"
        if not key.exists():
            key.write_bytes(os.urandom(1024))
            key.chmod(0o400)
        self.socket = munge / "munge.socket"
        # --force: munged refuses a socket directory that others could write, as /tmp's parents are.
        self._spawn(
            [
                _sbin("munged"),
                "-F",
                "--force",
                f"--key-file={key}",
                f"--socket={self.socket}",
                f"--pid-file={munge}/munged.pid",
                f"--log-file={munge}/munged.log",
                f"--seed-file={munge}/munged.seed",
            ],
            "munged",
        )
        self.wait_for(lambda: self.socket.exists(), 15, message="munged never made its socket")

    def _start_mariadb(self, port: int) -> None:
        data = self.folder / "db"
        if not (data / "mysql").exists():
            subprocess.run(
                [
                    _sbin("mariadb-install-db"),
                    "--no-defaults",
                    f"--datadir={data}",
                    "--user=root",
                    "--auth-root-authentication-method=normal",
                    "--skip-test-db",
                ],
                check=True,
                capture_output=True,
                timeout=120,
            )
        self.db_socket = self.folder / "run" / "mysqld.sock"
        self._spawn(
            [
                _sbin("mariadbd"),
                "--no-defaults",
                "--user=root",
                f"--datadir={data}",
                "--bind-address=127.0.0.1",
                f"--port={port}",
                f"--socket={self.db_socket}",
                "--skip-name-resolve",
                f"--pid-file={self.folder}/run/mysqld.pid",
                "--innodb-buffer-pool-size=32M",
                "--skip-log-bin",
            ],
            "mariadbd",
        )
        client = shutil.which("mariadb") or shutil.which("mysql")

        def sql(statement: str) -> bool:
            return (
                subprocess.run(
                    [client, "--no-defaults", f"--socket={self.db_socket}", "-uroot", "-e", statement],
                    capture_output=True,
                ).returncode
                == 0
            )

        self.wait_for(lambda: sql("select 1"), 60, message="MariaDB never answered")
        assert sql(
            "CREATE USER IF NOT EXISTS 'slurm'@'127.0.0.1' IDENTIFIED BY 'slurm';"
            "GRANT ALL ON slurm_acct_db.* TO 'slurm'@'127.0.0.1'; FLUSH PRIVILEGES;"
        )

    def _write_configs(self, ports: dict[str, int]) -> None:
        etc, folder = self.folder / "etc", self.folder
        gres_types = sorted({kind for kind, _ in NODES.values()})
        nodes = "\n".join(
            f"NodeName={node} NodeAddr=127.0.0.1 NodeHostname={socket.gethostname()} Port={ports[node]} CPUs=16 "
            f"RealMemory=64000 Gres=gpu:{kind}:{count} State=UNKNOWN"
            for node, (kind, count) in NODES.items()
        )
        self.conf.write_text(f"""\
ClusterName={CLUSTER}
SlurmctldHost={socket.gethostname()}(127.0.0.1)
SlurmctldPort={ports["ctld"]}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket={self.socket},cred_expire=5
CredType=cred/munge
StateSaveLocation={folder}/spool/ctld
SlurmdSpoolDir={folder}/spool/%n
SlurmctldPidFile={folder}/run/slurmctld.pid
SlurmdPidFile={folder}/run/slurmd-%n.pid
SlurmctldLogFile={folder}/log/slurmctld.log
SlurmdLogFile={folder}/log/slurmd-%n.log
SlurmdParameters=config_overrides
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/linux
MpiDefault=none
PriorityType=priority/multifactor
PriorityWeightPartition=1000
ReturnToService=1
SchedulerType=sched/backfill
SchedulerParameters=bf_interval=1,sched_interval=2
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
PreemptType=preempt/partition_prio
PreemptMode=REQUEUE
JobRequeue=1
MinJobAge=2
KillWait=2
InactiveLimit=0
GresTypes=gpu
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=127.0.0.1
AccountingStoragePort={ports["dbd"]}
AccountingStoragePass={self.socket}
AccountingStorageEnforce=associations
AccountingStorageTRES=gres/gpu,{",".join(f"gres/gpu:{kind}" for kind in gres_types)}
JobCompType=jobcomp/none
{nodes}
PartitionName=batch Nodes=ALL Default=YES PriorityTier=1 PreemptMode=REQUEUE MaxTime=INFINITE State=UP
PartitionName=urgent Nodes=ALL PriorityTier=10 PreemptMode=OFF MaxTime=INFINITE State=UP
""")
        gres = []
        for node, (kind, count) in NODES.items():
            files = f"{folder}/fakedev/nvidia[0-{count - 1}]"
            gres.append(f"NodeName={node} Name=gpu Type={kind} File={files}")
        (etc / "gres.conf").write_text("\n".join(gres) + "\n")
        dbd = etc / "slurmdbd.conf"
        dbd.write_text(f"""\
AuthType=auth/munge
AuthInfo=socket={self.socket}
DbdHost=localhost
DbdAddr=127.0.0.1
DbdPort={ports["dbd"]}
SlurmUser=root
LogFile={folder}/log/slurmdbd.log
PidFile={folder}/run/slurmdbd.pid
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort={ports["mariadb"]}
StorageUser=slurm
StoragePass=slurm
StorageLoc=slurm_acct_db
""")
        dbd.chmod(0o600)


# Times Slurm enforces limits at: --time=1 ends 60–90 s after the start.
TIMEOUT_WAIT_S = 150
SACCT_FIELDS = (
    "JobID,JobIDRaw,Cluster,Partition,Account,QOS,Priority,State,ExitCode,Reason,Submit,Eligible,Start,"
    "End,Timelimit,ReqTRES,AllocTRES,NodeList,SubmitLine"
)
EVENT_FIELDS = "Cluster,NodeName,Start,End,State,Reason,User,Event,TRES"


def run_scenarios(box: SlurmBox) -> dict[str, str]:
    """Drive the box through every case the importer must map; scenario → job id, once all have ended.

    The time limit is the longest wait (60–90 s), so that job starts first and
    everything else happens meanwhile. Jobs are pinned to nodes (-w) so that
    who waits for whom and who is preempted does not depend on placement.
    """
    hold, jobs = box.hold_script(), {}

    def submit(name: str, account: str, node: str, *options: str, script: str = hold) -> str:
        jobs[name] = box.sbatch("-A", account, "-w", node, *options, script=script)
        return jobs[name]

    submit("timeout", "llm", "gpu01", "--gres=gpu:h100:1", "--time=1", script="sleep 300")
    submit("busy", "llm", "gpu01", "--gres=gpu:h100:3")
    submit("waits_for_gpus", "vision", "gpu01", "--gres=gpu:h100:2", script="sleep 1")
    submit("preempted", "vision", "gpu02", "-p", "batch", "--gres=gpu:h100:4")
    submit("node_fail", "llm", "gpu03", "--gres=gpu:h100:2")
    submit("completes", "vision", "gpu04", "--gres=gpu:a100:1", script="sleep 1")
    submit("fails", "vision", "gpu04", "--gres=gpu:a100:1", script="sleep 1; exit 3")
    submit("cancelled", "llm", "gpu04", "--gres=gpu:a100:1")
    submit("requeued", "llm", "gpu04", "--gres=gpu:a100:1")
    submit("array", "vision", "gpu04", "--gres=gpu:a100:1", "--array=0-2", script="sleep 1")
    submit("cpu_only", "vision", "gpu04", script="sleep 1")
    # Held at submission (never eligible, so a plain `sacct -S` never lists them): one cancelled while
    # held, one released later (it then queues on gpu04 and runs), one still held when the recording ends.
    submit("held_cancelled", "llm", "gpu04", "--hold", "--gres=gpu:a100:1", script="sleep 1")
    submit("held_released", "vision", "gpu04", "--hold", "--gres=gpu:a100:2", script="sleep 1")
    submit("held", "vision", "gpu04", "--hold", "--gres=gpu:a100:1", script="sleep 1")
    for name in ("preempted", "node_fail", "requeued"):
        box.release(jobs[name], attempt=1)  # their second attempt runs a second and ends
    for name in ("busy", "preempted", "node_fail", "cancelled", "requeued"):
        box.wait_state(jobs[name], "RUNNING")
    time.sleep(1.5)  # every first attempt runs at least a second
    submit("preemptor", "llm", "gpu02", "-p", "urgent", "--gres=gpu:h100:4", script="sleep 2")
    box.run("scancel", jobs["cancelled"])
    box.run("scancel", jobs["held_cancelled"])
    box.run("scontrol", "release", jobs["held_released"])  # held for at least the 1.5 s above
    box.run("scontrol", "requeue", jobs["requeued"])
    box.run("scontrol", "update", "nodename=gpu03", "state=down", "reason=xid 79: GPU has fallen off the bus")
    box.wait_state(jobs["node_fail"], "PENDING")
    time.sleep(2)
    box.run("scontrol", "update", "nodename=gpu03", "state=resume")
    box.release(jobs["busy"])
    for name in (
        "preemptor",
        "preempted",
        "node_fail",
        "requeued",
        "busy",
        "waits_for_gpus",
        "completes",
        "held_released",
    ):
        box.wait_state(jobs[name], "COMPLETED", timeout=90)
    box.run("scontrol", "update", "nodename=gpu03", "state=drain", "reason=maintenance: firmware")
    box.wait_for(
        lambda: (
            "DRAIN"
            in box.run("sacctmgr", "-n", "-P", "show", "event", "format=NodeName,State", "Start=2020-01-01").upper()
        ),
        30,
        message="the drain was never recorded",
    )
    time.sleep(2)
    box.run("scontrol", "update", "nodename=gpu03", "state=resume")
    box.wait_state(jobs["timeout"], "TIMEOUT", timeout=TIMEOUT_WAIT_S)
    box.wait_for(
        lambda: box.run("squeue", "-h", "-o", "%i").split() == [jobs["held"]],
        60,
        message="jobs other than the held one still queued at the end",
    )
    return jobs


def capture(box: SlurmBox, folder: Path) -> dict[str, Path]:
    """What a site hands `mpg import slurm`, made as docs/slurm.md says: sacct rows (the eligible jobs',
    then, --noheader, those of every job that ended and of the jobs pending, which repeat some of
    the first), node events and node inventory, as files."""
    folder.mkdir(parents=True, exist_ok=True)
    sacct = (
        "sacct",
        "--allocations",
        "--duplicates",
        "--parsable2",
        "--allusers",
        "-S",
        "2020-01-01",
        "-E",
        "now",
        "-o",
        SACCT_FIELDS,
    )
    pending = ",".join(box.run("squeue", "--noheader", "--all", "--states=PENDING", "--format=%A").split())
    (folder / "sacct.txt").write_text(
        box.run(*sacct)
        + box.run(*sacct, "--noheader", "--state=BF,CA,CD,DL,F,NF,OOM,PR,TO")
        + (box.run(*sacct, "--noheader", "-j", pending) if pending else "")
    )
    outputs = {
        "events.txt": ("sacctmgr", "-P", "show", "event", f"format={EVENT_FIELDS}", "Start=2020-01-01"),
        "nodes.txt": ("scontrol", "show", "node", "-o"),
        # GPU-seconds per account of each partition's jobs, as a site reads them (docs/slurm.md).
        **{
            f"sreport-{partition}.txt": (
                "sreport",
                "-P",
                "-t",
                "seconds",
                "job",
                "SizesByAccount",
                "-T",
                "gres/gpu",
                "start=2020-01-01T00:00:00",
                "end=now",
                "FlatView",
                f"Partitions={partition}",
            )
            for partition in PARTITIONS
        },
    }
    for name, command in outputs.items():
        (folder / name).write_text(box.run(*command))
    return {name: folder / name for name in ("sacct.txt", *outputs)}
