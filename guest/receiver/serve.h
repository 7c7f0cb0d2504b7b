/*
 * receiver/serve.h — `receiver serve --root R` (spec/guest.md §17 item 2): the
 * resident receiver. Takes requests framed as `run --stdin` takes one
 * (spec/guest.md §16.2 item 2), one after another on standard input, and answers
 * each on standard output as `run --stdin` does (§16.2 item 3), in order.
 *
 * Each request runs in a worker process of its own (a fork, no exec), which
 * does exactly what `run --stdin` does: §7.1's admission and replay rule,
 * the lock taken for the run and released before the answer, the
 * durability points of §16.2 item 4. So between runs `serve` holds no lock,
 * no journal and no descriptor of the guest root; what a run starts belongs
 * to the worker's subreaper scope, and the worker is gone when the answer
 * is out: ending `serve` ends no survivor (§16.1).
 *
 * A diagnostic script (spec/guest.md §17 item 3 over §13) comes on the same
 * stream and is run by serve itself (serve_diag.h): no worker, no lock, no
 * record.
 *
 * It exits 0 when its standard input ends, when R is gone (the guest was
 * released) or after RECEIVER_SERVE_IDLE_MS without a request
 * (RELAY_RECEIVER_SERVE_IDLE_MS in its environment shortens it, for tests).
 * A header it cannot read leaves the stream out of step: it answers the
 * refusal frame and exits 2. A worker that ended without its whole answer
 * (a signal, a crash) ends `serve` with exit 3, so the host sees the
 * channel close and asks about that id (§17 item 4).
 */
#ifndef RECEIVER_SERVE_H
#define RECEIVER_SERVE_H

int cmd_serve(int argc, char **argv);

#endif
