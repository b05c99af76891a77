"""OpenBLAS's parallel work on the OpenMP team that runs the generated kernels: one thread
pool in the process instead of two.

NumPy's OpenBLAS starts its own worker threads, and after each call they spin for about
2**28 cycles (0.1 s) before they sleep.  On a machine with as many cores as threads, a
parallel kernel that follows a product finds its second core taken by a spinning OpenBLAS
worker, and a product that follows a kernel finds it taken by an OpenMP worker: an MLP
block of 64 rows (two products, two epilogues) spent a quarter of its time in that fight.

OpenBLAS 0.3.28 and later let the caller run its jobs (``openblas_set_threads_callback_
function``): ``callback(sync, dojob, numjobs, jobdata_elsize, jobdata, dojob_data)`` must
run ``dojob(i, jobdata + i * jobdata_elsize, dojob_data)`` for every ``i < numjobs``, all
at once (a level-3 product's jobs wait on each other's packed panels, so running them one
after another would never finish).  :data:`CALLBACK_TEXT` is that callback in LLVM IR:

- one job per thread of a libgomp team of exactly ``numjobs`` threads (``GOMP_parallel``),
  the team the kernels fork too, whose workers then find the cores free;
- where such a team cannot be had — inside a parallel region (a nested team has one
  thread), with ``OMP_DYNAMIC`` on or a thread limit below ``numjobs`` — one POSIX thread
  per job after the first, joined before returning;
- each job under a thread number OpenBLAS's own server threads never use: ``dojob``'s
  first argument picks the thread's status slot and packing buffer
  (``thread_status[t]``, ``blas_thread_buffer[t]``, ``t < MAX_CPU_NUMBER``), and the LU
  factorization (``getrf_parallel``) still queues its jobs to the server threads
  (``exec_blas_async``, slots ``0 .. threads - 2``): a product run through the callback
  under those numbers while another Python thread factorizes overwrote their status and
  hung the factorization.  The callback's jobs take slots ``MAX_CPU_NUMBER / 2 + i``
  (installed only while OpenBLAS has at most that many threads);
- one caller at a time (a mutex): two concurrent callers would share those slots.

The callback is installed when the LLVM backend prepares the process and applies to every
OpenBLAS call in it, NumPy's own included (they run on the same team).  A forked child
removes it (libgomp's team does not survive a fork; OpenBLAS's own server starts again
in the child).  ``RELAXJAX_BLAS_THREADS=openblas`` keeps OpenBLAS's own threads.
"""
from __future__ import annotations

import ctypes
import os

# one worker runs jobs tid, tid + T, ...: with a team of numjobs threads, exactly job tid
CALLBACK_TEXT = """; relaxjax: OpenBLAS's jobs on the OpenMP team (see blas_threads.py)
%jobs = type { ptr, i64, i64, ptr, i32 }

@rj_blas_jobs_mutex = internal global [64 x i8] zeroinitializer, align 16
; the first thread slot of the callback's jobs, and OpenBLAS's MAX_CPU_NUMBER (set at install)
@rj_blas_jobs_slot = global i32 0
@rj_blas_jobs_slots = global i32 0
; calls run on the team and on POSIX threads (read by blas_threads.counts)
@rj_blas_jobs_team = global i64 0
@rj_blas_jobs_posix = global i64 0

declare i32 @omp_get_thread_num()
declare i32 @omp_get_num_threads()
declare i32 @omp_in_parallel()
declare i32 @omp_get_dynamic()
declare i32 @omp_get_thread_limit()
declare void @GOMP_parallel(ptr, ptr, i32, i32)
declare i32 @pthread_mutex_lock(ptr)
declare i32 @pthread_mutex_unlock(ptr)
declare i32 @pthread_create(ptr, ptr, ptr, ptr)
declare i32 @pthread_join(i64, ptr)
declare i32 @llvm.smin.i32(i32, i32)

define internal void @rj_blas_job(ptr %jobs, i64 %i) {
entry:
  %dojobp = getelementptr inbounds %jobs, ptr %jobs, i32 0, i32 0
  %dojob = load ptr, ptr %dojobp
  %sizep = getelementptr inbounds %jobs, ptr %jobs, i32 0, i32 2
  %size = load i64, ptr %sizep
  %datap = getelementptr inbounds %jobs, ptr %jobs, i32 0, i32 3
  %data = load ptr, ptr %datap
  %argp = getelementptr inbounds %jobs, ptr %jobs, i32 0, i32 4
  %arg = load i32, ptr %argp
  %off = mul i64 %i, %size
  %job = getelementptr inbounds i8, ptr %data, i64 %off
  %i32 = trunc i64 %i to i32
  %n = getelementptr inbounds %jobs, ptr %jobs, i32 0, i32 1
  %n64 = load i64, ptr %n
  %n32 = trunc i64 %n64 to i32
  %first = load i32, ptr @rj_blas_jobs_slot
  %slots = load i32, ptr @rj_blas_jobs_slots
  %room = sub i32 %slots, %n32
  %base = call i32 @llvm.smin.i32(i32 %first, i32 %room)
  %slot = add i32 %base, %i32
  call void %dojob(i32 %slot, ptr %job, i32 %arg)
  ret void
}

define internal void @rj_blas_team(ptr %jobs) {
entry:
  %t = call i32 @omp_get_thread_num()
  %nt = call i32 @omp_get_num_threads()
  %tid = sext i32 %t to i64
  %step = sext i32 %nt to i64
  %np = getelementptr inbounds %jobs, ptr %jobs, i32 0, i32 1
  %n = load i64, ptr %np
  br label %head
head:
  %i = phi i64 [ %tid, %entry ], [ %next, %body ]
  %more = icmp slt i64 %i, %n
  br i1 %more, label %body, label %done
body:
  call void @rj_blas_job(ptr %jobs, i64 %i)
  %next = add i64 %i, %step
  br label %head
done:
  ret void
}

; a POSIX thread's job: { ptr jobs, i64 i }
define internal ptr @rj_blas_thread(ptr %arg) {
entry:
  %jobs = load ptr, ptr %arg
  %ip = getelementptr inbounds { ptr, i64 }, ptr %arg, i32 0, i32 1
  %i = load i64, ptr %ip
  call void @rj_blas_job(ptr %jobs, i64 %i)
  ret ptr null
}

define void @rj_blas_threads_callback(i32 %sync, ptr %dojob, i32 %numjobs, i64 %elsize, ptr %data, i32 %arg) {
entry:
  %jobs = alloca %jobs
  %n = sext i32 %numjobs to i64
  store ptr %dojob, ptr %jobs
  %np = getelementptr inbounds %jobs, ptr %jobs, i32 0, i32 1
  store i64 %n, ptr %np
  %sizep = getelementptr inbounds %jobs, ptr %jobs, i32 0, i32 2
  store i64 %elsize, ptr %sizep
  %datap = getelementptr inbounds %jobs, ptr %jobs, i32 0, i32 3
  store ptr %data, ptr %datap
  %argp = getelementptr inbounds %jobs, ptr %jobs, i32 0, i32 4
  store i32 %arg, ptr %argp
  call i32 @pthread_mutex_lock(ptr @rj_blas_jobs_mutex)
  %one = icmp sle i32 %numjobs, 1
  br i1 %one, label %alone, label %choose
alone:
  call void @rj_blas_team(ptr %jobs)
  br label %out
choose:
  %inpar = call i32 @omp_in_parallel()
  %dyn = call i32 @omp_get_dynamic()
  %limit = call i32 @omp_get_thread_limit()
  %nested = icmp ne i32 %inpar, 0
  %dynamic = icmp ne i32 %dyn, 0
  %limited = icmp slt i32 %limit, %numjobs
  %no1 = or i1 %nested, %dynamic
  %no = or i1 %no1, %limited
  br i1 %no, label %posix, label %team
team:
  atomicrmw add ptr @rj_blas_jobs_team, i64 1 monotonic
  call void @GOMP_parallel(ptr @rj_blas_team, ptr %jobs, i32 %numjobs, i32 0)
  br label %out
posix:
  atomicrmw add ptr @rj_blas_jobs_posix, i64 1 monotonic
  %tids = alloca i64, i32 %numjobs
  %args = alloca { ptr, i64 }, i32 %numjobs
  br label %start
start:
  %i = phi i64 [ 1, %posix ], [ %i1, %started ]
  %go = icmp slt i64 %i, %n
  br i1 %go, label %spawn, label %first
spawn:
  %a = getelementptr inbounds { ptr, i64 }, ptr %args, i64 %i
  store ptr %jobs, ptr %a
  %ai = getelementptr inbounds { ptr, i64 }, ptr %a, i32 0, i32 1
  store i64 %i, ptr %ai
  %tp = getelementptr inbounds i64, ptr %tids, i64 %i
  %rc = call i32 @pthread_create(ptr %tp, ptr null, ptr @rj_blas_thread, ptr %a)
  %failed = icmp ne i32 %rc, 0
  br i1 %failed, label %inline, label %started
inline:
  store i64 0, ptr %tp
  call void @rj_blas_job(ptr %jobs, i64 %i)
  br label %started
started:
  %i1 = add i64 %i, 1
  br label %start
first:
  call void @rj_blas_job(ptr %jobs, i64 0)
  br label %join
join:
  %j = phi i64 [ 1, %first ], [ %j1, %joined ]
  %more = icmp slt i64 %j, %n
  br i1 %more, label %wait, label %out
wait:
  %tq = getelementptr inbounds i64, ptr %tids, i64 %j
  %tid = load i64, ptr %tq
  %real = icmp ne i64 %tid, 0
  br i1 %real, label %dojoin, label %joined
dojoin:
  call i32 @pthread_join(i64 %tid, ptr null)
  br label %joined
joined:
  %j1 = add i64 %j, 1
  br label %join
out:
  call i32 @pthread_mutex_unlock(ptr @rj_blas_jobs_mutex)
  ret void
}
"""

ENTRY = "rj_blas_threads_callback"
_INSTALLED: list = []          # (the setter, the module holding the callback), once installed


def wanted() -> bool:
    """Whether OpenBLAS's jobs should run on the OpenMP team (``RELAXJAX_BLAS_THREADS``:
    "openmp", the default, or "openblas" for its own threads)."""
    return os.environ.get("RELAXJAX_BLAS_THREADS", "openmp").strip().lower() != "openblas"


def install(setter_address: int | None, threads: int, slots: int, compile_module) -> bool:
    """Install the callback through OpenBLAS's ``set_threads_callback_function`` at
    ``setter_address`` (None: this OpenBLAS has none, nothing is done), for an OpenBLAS of
    ``threads`` threads and ``slots`` thread slots (``MAX_CPU_NUMBER``; 0: unknown, nothing
    is done).  ``compile_module(text, entry names)`` gives a module whose ``address(name)``
    is the callback's, kept for the process's life.  Returns whether it is installed."""
    if _INSTALLED:
        return True
    if setter_address is None or not wanted() or slots < 2 or threads > slots // 2:
        return False
    module = compile_module(CALLBACK_TEXT, [ENTRY])
    ctypes.c_int32.from_address(module.address("rj_blas_jobs_slot")).value = slots // 2
    ctypes.c_int32.from_address(module.address("rj_blas_jobs_slots")).value = slots
    setter = ctypes.CFUNCTYPE(None, ctypes.c_void_p)(setter_address)
    setter(module.address(ENTRY))
    _INSTALLED.append((setter, module))
    return True


def installed() -> bool:
    return bool(_INSTALLED)


def counts() -> dict:
    """How many OpenBLAS calls of more than one job ran on the OpenMP team and on POSIX
    threads since the callback was installed (empty when it is not)."""
    if not _INSTALLED:
        return {}
    module = _INSTALLED[0][1]
    return {k: ctypes.c_int64.from_address(module.address(f"rj_blas_jobs_{k}")).value
            for k in ("team", "posix")}


def _remove_after_fork() -> None:
    """In a forked child: OpenBLAS's own threads again (libgomp's team is not there)."""
    if _INSTALLED:
        _INSTALLED[0][0](None)
        _INSTALLED.clear()


os.register_at_fork(after_in_child=_remove_after_fork)
