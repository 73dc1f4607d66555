#!/usr/bin/env python3
"""What a user sees on bad input (exit 2, one line, no MPI_Abort): flags, values, commands, config
and data files (one rank's bad or different from the others'), checkpoints that do not fit, sizes
beyond memory, and the notes on values that are used but rounded or that change nothing.
Outputs, a failure to write them, a diverged run, SIGTERM and Ctrl-C: test_cli_outputs.py.
  test_cli_input.py --bin build/bin/starring
The checks every case shares, and why some cases run at once: cli_case.py.
"""
import os
import resource
import subprocess
import sys
import tempfile

import bin_main
import cli_case
from cli_case import BIN, MPIRUN, TINY, CliCase, with_opts, write_idx_dir


class BadInput(CliCase):
    """Each case is a few short runs (launch and refusal): six at once (18 s of CPU in all;
    66 s with three at once at load 11-14)."""
    overlap = 6

    def test_bad_values(self):
        self.run_case(2, ["train", "--lr", "-1"] + TINY, 2, ["--lr", "> 0", "-1"])
        self.run_case(2, ["train", "--backend", "ps", "--servers", "0"] + TINY, 2, ["--servers"])
        # a number beyond int, or no rank left for a worker: named, exit 2 (not std::stoi's text)
        self.run_case(2, ["train", "--backend", "ps", "--servers", "3000000000"] + TINY, 2,
                      ["--servers", "3000000000"])
        self.run_case(2, ["train", "--backend", "ps", "--servers", "2"] + TINY, 2,
                      ["--servers 2", "needs at least 3 ranks"])
        self.run_case(0, ["train"] + with_opts(TINY, hidden="0,5"), 2, ["--hidden", "width 1"])
        # values that overflowed where they are converted: 'inf' s timed out at once
        self.run_case(2, ["train", "--backend", "ring", "--timeout", "inf"] + TINY, 2,
                      ["--timeout", "inf"])
        self.run_case(0, ["train", "--lr", "inf"] + TINY, 2, ["--lr", "finite", "inf"])
        # more threads than OpenBLAS runs (its MAX_THREADS, 64 here): capped without a word
        self.run_case(0, ["train", "--threads", "100000"] + TINY, 2,
                      ["--threads", "between 1 and", "MAX_THREADS", "100000"])
        # a straggler that outsleeps --timeout (alone, 0:99999999999 slept for years)
        self.run_case(0, ["train", "--straggler", "0:99999999999"] + TINY, 2,
                      ["--straggler 0:99999999999", "--timeout"])
        # a bench message no rank can hold: refused before rank 0 alone failed to allocate it
        # (the others sat at a barrier for minutes)
        self.run_case(2, ["bench", "--backends", "ring", "-b", "4", "-e", "65536G"], 2,
                      ["--max-bytes", "memory"])

    def test_options_that_would_be_ignored_are_refused(self):
        # relaxed consistency outside the PS, a fault on a rank that was not started
        self.run_case(2, ["train", "--backend", "ring", "--consistency", "asp"] + TINY, 2,
                      ["--consistency asp", "synchronous"])
        self.run_case(2, ["train", "--backend", "ring", "--fault", "kill:5:3"] + TINY, 2,
                      ["--fault kill:5:3", "no rank 5", "2 ranks"])

    def test_a_stop_or_fault_the_run_could_not_act_on_is_refused(self):
        # a stop request the run could not act on: nowhere to save it, under asp, or a
        # server's rank (RANK is a worker index); --resume auto with no folder to look in
        self.run_case(0, ["train", "--fault", "stop:0:2"] + TINY, 2,
                      ["--fault stop:0:2", "needs --checkpoint-dir"])
        ck = os.path.join(self.tmp, "ck-stop")
        self.run_case(3, ["train", "--backend", "ps", "--servers", "1", "--consistency", "asp",
                          "--checkpoint-dir", ck, "--fault", "stop:0:2"] + TINY, 2,
                      ["--fault stop:0:2", "asp"])
        self.run_case(3, ["train", "--backend", "ps", "--servers", "1", "--checkpoint-dir", ck,
                          "--fault", "stop:2:2"] + TINY, 2,
                      ["--fault stop:2:2", "worker's index", "2 workers"])
        self.run_case(0, ["train", "--resume", "auto"] + TINY, 2,
                      ["--resume auto", "needs --checkpoint-dir"])
        # a fault after the last step never fired
        self.run_case(0, ["train", "--fault", "hang:0:5"] + TINY, 2,
                      ["--fault hang:0:5", "--max-steps 4"])
        # ... nor after the last step of the last epoch (512 samples, 2 x 16 a step: 16 steps):
        # the run ended with exit 0 as if the fault had been survived
        self.run_case(2, ["train", "--backend", "ring", "--fault", "kill:1:17"]
                      + with_opts(TINY, max_steps=-1), 2, ["--fault kill:1:17", "16 steps"])

    def test_data_files(self):
        gone = os.path.join(self.tmp, "no-data")
        self.run_case(0, ["train", "--data-dir", gone, "--max-steps", "1"], 2,
                      ["--data-dir: folder", gone, "does not exist"])
        plain = os.path.abspath(__file__)
        self.run_case(0, ["train", "--data-dir", plain, "--max-steps", "1"], 2,
                      ["--data-dir", plain, "is not a folder"])
        empty = os.path.join(self.tmp, "empty")
        os.mkdir(empty)
        self.run_case(0, ["train", "--data-dir", empty, "--max-steps", "1"], 2,
                      ["cannot find", empty, "train-images-idx3-ubyte.gz"])
        magic = os.path.join(self.tmp, "magic")
        write_idx_dir(magic, magic=0x801)
        self.run_case(2, ["train", "--backend", "ring", "--data-dir", magic, "--batch", "8"], 2,
                      ["wrong magic", "train-images"])
        mismatch = os.path.join(self.tmp, "mismatch")
        write_idx_dir(mismatch, n_labels=32)
        self.run_case(2, ["train", "--backend", "ring", "--data-dir", mismatch, "--batch", "8"],
                      2, ["64 images", "32 labels"])
        # test images of another shape: found before training, not by the first evaluation
        shape = os.path.join(self.tmp, "shape")
        write_idx_dir(shape, test_side=32)
        self.run_case(0, ["train", "--data-dir", shape, "--batch", "8"], 2,
                      ["t10k-images", "32x32", "28x28"])
        # Found only when the payload is read, by every rank at once: agreed, not aborted.
        trunc = os.path.join(self.tmp, "trunc")
        write_idx_dir(trunc, cut=500)
        err, _ = self.run_case(2, ["train", "--backend", "ring", "--data-dir", trunc, "--batch",
                                   "8"], 2, ["truncated", "train-images"])
        self.assertNotIn("MPI_Abort", err)
        # ... also with a dedicated server, which loads no data: the ranks agree before the
        # parameter server starts, so it is not left waiting for the workers
        err, _ = self.run_case(3, ["train", "--backend", "ps", "--servers", "1", "--data-dir",
                                   trunc, "--batch", "8"], 2, ["truncated", "train-images"])
        self.assertNotIn("MPI_Abort", err)

    def test_commands(self):
        self.run_case(0, [], 2, ["no command"])
        self.run_case(2, ["frobnicate"], 2, ["unknown command 'frobnicate'"])
        self.run_case(2, ["bench", "--backends", "ring", "-b", "1X"], 2, ["--min-bytes", "1X"])
        # a training option that would do nothing in a benchmark is refused, not ignored
        self.run_case(0, ["bench", "--summary-file", "s.json"], 2, ["'--summary-file'"])
        self.run_case(0, ["bench-model", "--epochs", "3"], 2, ["'--epochs'"])
        # so is a sync option the benchmark would not use (they ran without it, exit 0)
        self.run_case(0, ["bench", "--backends", "ring", "--servers", "2"], 2,
                      ["--servers 2", "--backends is 'ring'"])
        self.run_case(2, ["bench", "--backends", "ps", "--consistency", "asp", "-b", "1K"], 2,
                      ["--consistency asp", "push-pull is synchronous"])

    def test_unknown_backend(self):
        # a typo in the backend's name was found only when the backend was made: after every
        # rank had loaded its data (np 2 on Fashion-MNIST under load: 10 s) and, without mpirun,
        # after the note that backend 'rign' runs a single worker
        err, _ = self.run_case(0, ["train", "--backend", "rign"] + TINY, 2,
                               ["unknown backend 'rign'", "known: local, ps, ring"])
        self.assertNotIn("single worker", err)
        # found before the data is looked at (here a folder that does not exist)
        self.run_case(2, ["train", "--backend", "rign", "--data-dir",
                          os.path.join(self.tmp, "no-data"), "--max-steps", "1"], 2,
                      ["unknown backend 'rign'"])

    def test_config_files(self):
        ini = os.path.join(self.tmp, "bad.ini")
        with open(ini, "w") as f:
            f.write("[train]\nbatch = 16\nlearning_rate = 0.1\n")
        self.run_case(2, ["train", "--config", ini] + TINY, 2, [ini + ":3", "learning_rate"])
        self.run_case(1, ["train", "--config", ini + ".missing"] + TINY, 2,
                      ["--config", ini + ".missing"])
        # a folder opened as an empty file: every option silently stayed at its default
        self.run_case(0, ["train", "--config", self.tmp] + TINY, 2, ["--config", "is a folder"])
        # a bad value is named with its line (the parser's error had none); ';' after a value
        # starts a comment, as '#' does; --run-name is a key like any other (it was unknown)
        with open(ini, "w") as f:
            f.write("[train]\nrun-name = x ; a label\nmomentum = 0.5 ; sgd\nbatch = many\n")
        self.run_case(0, ["train", "--config", ini] + TINY[:-4], 2,
                      [ini + ":4", "'many'", "batch"])

    def test_data_payload_bad_on_one_rank_names_it(self):
        # Each rank reads its own --data-dir (a node's local copy): rank 1's is truncated, found
        # only when the payload is read. The line named the file but not the rank, although the
        # other ranks' data was sound (an MPMD launch stands in for two nodes).
        good, trunc = os.path.join(self.tmp, "pgood"), os.path.join(self.tmp, "ptrunc")
        write_idx_dir(good)
        write_idx_dir(trunc, cut=500)
        base = ["train", "--epochs", "1", "--max-steps", "4", "--batch", "8", "--progress", "off"]
        for backend, np_, bad in ((["ring"], 2, 1), (["ps", "--servers", "1"], 3, 1)):
            dirs = [good] * (np_ - 1)
            dirs.insert(bad, trunc)
            args = base + ["--backend", *backend, "--data-dir", dirs[0]]
            for d in dirs[1:]:
                args += [":", "-np", "1", BIN] + base + ["--backend", *backend, "--data-dir", d]
            err, _ = self.run_case(1, args, 2, ["truncated", trunc], rank=bad, outputs=False)
            self.assertNotIn("MPI_Abort", err)

    def test_ranks_whose_data_differ_in_size_are_refused(self):
        # Each rank reads its own --data-dir: a worker with 128 training samples beside one with
        # 64 took twice the steps, and the job ended in a timeout at a barrier after 60 s
        # (MPI_Abort, exit 1) that did not say why. The paths may differ; the shapes may not.
        small, big = os.path.join(self.tmp, "d64"), os.path.join(self.tmp, "d128")
        write_idx_dir(small)
        write_idx_dir(big, n_train=128)
        base = ["train", "--epochs", "1", "--batch", "8", "--progress", "off"]
        for backend, np_ in ((["ring"], 2), (["ps", "--servers", "1"], 3)):
            args = (base + ["--backend", *backend, "--data-dir", small, ":", "-np", str(np_ - 1),
                            BIN] + base + ["--backend", *backend, "--data-dir", big])
            self.run_case(1, args, 2, ["the workers' data differ", "has 128 training and 16 test",
                                       "rank 0 64 training and 16 test", small, big],
                          rank=1, bound=30, outputs=False)

    def test_ranks_whose_data_differ_in_content_are_refused(self):
        # Same shape, other pixels (one node's copy another version of the data set, or damaged
        # where the gzip check cannot see it): the workers trained on other samples than each
        # other, silently. The files' CRC-32s are compared with the shapes.
        a, b = os.path.join(self.tmp, "da"), os.path.join(self.tmp, "db")
        write_idx_dir(a)
        write_idx_dir(b, pixel=4)
        base = ["train", "--epochs", "1", "--batch", "8", "--progress", "off"]
        args = (base + ["--backend", "ring", "--data-dir", a, ":", "-np", "1", BIN] + base +
                ["--backend", "ring", "--data-dir", b])
        self.run_case(1, args, 2, ["the workers' data differ", "CRC-32", a, b], rank=1, bound=30,
                      outputs=False)

    def test_batch_larger_than_shard(self):
        self.run_case(2, ["train", "--backend", "ring"] + with_opts(TINY, batch=300), 2,
                      ["batch 300", "shard"])
        # with a dedicated server too: checked before any communication, so one line, exit 2
        self.run_case(3, ["train", "--backend", "ps", "--servers", "1"] + with_opts(TINY, batch=300),
                      2, ["batch 300", "shard", "over 2 workers"])

    def test_one_process_without_mpirun_is_noted(self):
        # a ring of one moves nothing: said once, for a run that goes ahead, not before a refusal
        note = "one process (not started by mpirun)"
        with tempfile.TemporaryDirectory() as tmp:
            p = subprocess.run([BIN, "train", "--backend", "ring"] + TINY, capture_output=True,
                               text=True, timeout=60, cwd=tmp)
            self.assertEqual(p.returncode, 0, p.stderr)
            self.assertEqual(p.stderr.count(note), 1, p.stderr)
            p = subprocess.run([BIN, "train", "--backend", "ps", "--servers", "1"] + TINY,
                               capture_output=True, text=True, timeout=60, cwd=tmp)
            self.assertEqual(p.returncode, 2, p.stderr)
            self.assertIn("--servers 1 needs at least 2 ranks", p.stderr)
            self.assertNotIn(note, p.stderr)
            p = subprocess.run([BIN, "train", "--backend", "local"] + TINY, capture_output=True,
                               text=True, timeout=60, cwd=tmp)
            self.assertEqual(p.returncode, 0, p.stderr)
            self.assertNotIn(note, p.stderr)
            # bench: after its backends are made (it came before '2 ranks, but only 1')
            sizes = ["-b", "1K", "-e", "1K", "-n", "1", "-w", "0"]
            p = subprocess.run([BIN, "bench", "--backends", "ring"] + sizes, capture_output=True,
                               text=True, timeout=60, cwd=tmp)
            self.assertEqual(p.returncode, 0, p.stderr)
            self.assertEqual(p.stderr.count(note), 1, p.stderr)
            for mode in (["--mode", "overlap"], []):
                p = subprocess.run([BIN, "bench", "--backends", "ring@2"] + mode + sizes,
                                   capture_output=True, text=True, timeout=60, cwd=tmp)
                self.assertEqual(p.returncode, 2, p.stderr)
                self.assertIn("2 ranks, but only 1 were started", p.stderr)
                self.assertNotIn(note, p.stderr)

    def test_unknown_flag(self):
        err, _ = self.run_case(0, ["train", "--bogus"] + TINY, 2, ["'--bogus'"])
        self.assertEqual(len(err.strip().splitlines()), 1, err)
        self.run_case(2, ["train", "--bogus"] + TINY, 2, ["'--bogus'"])

    def test_every_rank_failing_alike_is_one_line(self):
        # each rank's message starts with its own rank: they were printed once per rank
        p = subprocess.run([BIN, "train", "--backend", "nccl"] + TINY, capture_output=True,
                           text=True, timeout=60)
        if "not available" not in p.stderr:
            self.skipTest("built with NCCL")
        self.run_case(3, ["train", "--backend", "nccl"] + TINY, 2, ["'nccl' is not available"])

    def test_more_chunks_than_reply_tags(self):
        # a 16.9M-parameter model cut into 4-byte chunks: more chunks than the worker has reply
        # tags for (ps/protocol.h kMaxChunks, 15.7M); refused, not run with tags that collide
        widths = "4096,4096"
        self.run_case(0, ["train"] + with_opts(TINY, hidden=widths, backend="ps",
                                               servers="colocated", ps_chunk_bytes=4), 2,
                      ["16891914 parameter-server chunks", "more than the 15728624",
                       "raise --ps-chunk-bytes"])

    def resume_with_a_dedicated_server(self, name, args, says):
        """Writes a checkpoint of one worker's TINY run, then resumes it with a dedicated server
        and `args`: bad input, one line naming rank 0, exit 2, no MPI_Abort."""
        ck = os.path.join(self.tmp, name)
        p = subprocess.run([BIN, "train", "--checkpoint-dir", ck] + TINY, capture_output=True,
                           text=True, timeout=60)
        self.assertEqual(p.returncode, 0, p.stderr)
        err, _ = self.run_case(3, ["train", "--backend", "ps", "--servers", "1", "--resume",
                                   "latest", "--checkpoint-dir", ck] + args, 2, says, rank=0)
        self.assertNotIn("MPI_Abort", err)

    def test_resume_misfit_with_a_dedicated_server(self):
        # A checkpoint that does not fit is bad input found before any communication: one line,
        # exit 2 (found by the workers later, the server waited for them until MPI_Abort).
        self.resume_with_a_dedicated_server("ck-misfit", TINY,
                                            ["does not fit", "global batch 16", "32"])

    def test_resume_misfit_found_by_the_workers_with_a_dedicated_server(self):
        # The model's input width comes from the data, which only the workers read: a checkpoint
        # of another width is found by them, after the ranks agreed on the data. The workers tell
        # the server: one line, exit 2 (the server waited for them, and the job ended by
        # MPI_Abort after 3 s with each worker's line).
        self.resume_with_a_dedicated_server("ck-width", with_opts(TINY, synthetic_dim=20, batch=8),
                                            ["does not fit", "model widths 16,16,10", "20,16,10"])

    def test_a_size_the_code_rounds_is_a_note_not_an_error(self):
        # accepted, as nccl-tests and BytePS accept sizes they align, with one note from rank 0
        # saying what is used (common/config_use.cc size_notes); the run trains to its end
        for args, says in (
                (["--backend", "ps", "--servers", "colocated", "--ps-chunk-bytes", "1000001"],
                 "--ps-chunk-bytes 1000001 is used as 1000000 bytes"),
                (["--backend", "ring-p2p", "--segment-bytes", "1000"],
                 "--segment-bytes 1000 is used as 960 bytes")):
            with self.subTest(args=args):
                p = subprocess.run([MPIRUN, "-np", "2", BIN, "train"] + args + TINY,
                                   capture_output=True, text=True, timeout=90)
                self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
                notes = [l for l in p.stderr.splitlines() if l.startswith("[starring] note: ")]
                self.assertEqual(len(notes), 1, p.stderr)
                self.assertIn(says, notes[0])
                self.assertIn("the nearest valid values are", notes[0])
                self.assertIn("== StarRing train summary ==", p.stdout)

    def test_a_warm_up_as_long_as_the_run_is_a_note(self):
        # experiments/fmnist_mlp.ini's 100 warm-up steps in a run cut short: the rate never
        # reached the scaled one and the cosine never began, without a word
        p = subprocess.run([MPIRUN, "-np", "2", BIN, "train", "--backend", "ring", "--lr-scale",
                            "linear", "--warmup-steps", "100", "--lr-schedule", "cosine"] + TINY, capture_output=True, text=True,
                           timeout=90)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        notes = [l for l in p.stderr.splitlines() if l.startswith("[starring] note: ")]
        self.assertEqual(notes, ["[starring] note: --warmup-steps 100 is not shorter than the run "
                                 "(4 steps): the rate never reaches --lr x the --lr-scale linear "
                                 "factor, and the cosine decay never starts"], p.stderr)
        p = subprocess.run([MPIRUN, "-np", "2", BIN, "train", "--backend", "ring", "--lr-scale",
                            "linear", "--warmup-steps", "2"] + TINY,
                           capture_output=True, text=True, timeout=90)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        self.assertNotIn("note:", p.stderr)


class OneAtATime(CliCase):
    """A preexec_fn (not safe beside threads): alone."""
    overlap = 1

    def test_model_beyond_memory(self):
        # refused before any allocation (the OOM killer ended such a run with no word); only
        # where a model under the 2^31-parameter cap can exceed memory
        memory = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        params = 1.5 * memory / 20  # the check counts 20 bytes a parameter
        if params > 2.0e9:
            self.skipTest(f"{memory / 2**30:.0f} GiB of memory holds every model under 2^31")
        widths = f"60000,{int(params / 60000) + 1}"

        def cap():  # a binary without the check fails to allocate instead of calling the OOM killer
            resource.setrlimit(resource.RLIMIT_AS, (memory // 2, memory // 2))
        self.run_case(0, ["train"] + with_opts(TINY, hidden=widths), 2,
                      ["--hidden", widths, "memory"], preexec=cap)

    def test_bench_beyond_one_hosts_memory_with_its_ranks_together(self):
        # 2 ranks at 0.4 x memory each: one rank could hold its two buffers (preflight's check),
        # the two of them with the backend's buffers could not; the kernel killed a rank in the
        # first row (SIGKILL, no word of why). Refused before rank 0's memcpy baseline.
        memory = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        size = f"{int(0.4 * memory / 2**30)}G"

        def cap():  # a binary without the check fails to allocate instead of calling the OOM killer
            resource.setrlimit(resource.RLIMIT_AS, (memory // 2, memory // 2))
        for mode in ("bandwidth", "overlap"):  # overlap: each its parameters and gradients
            with self.subTest(mode=mode):
                self.run_case(2, ["bench", "--mode", mode, "--backends", "ring", "-b", size, "-e",
                                  size, "-n", "1", "-w", "0"], 2,
                              [f"--max-bytes {size}: the 2 ranks on host ", "(ranks 0 and 1) "
                               "hold at least", "more than its memory"], preexec=cap)

    def test_bench_counts_a_dedicated_servers_shard_in_its_hosts_memory(self):
        # ps with 1 dedicated server on 3 ranks at 0.1 x memory: the 2 workers' input, result
        # and buffers (2 x 4.5 x 0.1) fit, the server's parameters, sums and copies of the whole
        # buffer (2.5 x 0.1 more) do not; the check counted workers alone and passed it.
        memory = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        size = f"{int(0.1 * memory / 2**20)}M"

        def cap():
            resource.setrlimit(resource.RLIMIT_AS, (memory // 2, memory // 2))
        self.run_case(3, ["bench", "--backends", "ps", "--servers", "1", "-b", size, "-e", size,
                          "-n", "1", "-w", "0"], 2,
                      [f"--max-bytes {size}: the 3 ranks on host ", "(ranks 0, 1 and 2) hold at "
                       "least", "a parameter server its shard's parameters and sums"],
                      preexec=cap)


if __name__ == "__main__":
    bin_main.main(sys.modules[__name__], shared=[cli_case])
