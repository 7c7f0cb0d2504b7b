/*
 * receiver/cmds.h — the receiver's subcommands other than `run`
 * (spec/guest.md §5.2). Each prints its one frame and returns the exit status.
 */
#ifndef RECEIVER_CMDS_H
#define RECEIVER_CMDS_H

int cmd_version(int argc, char **argv);
int cmd_hash(int argc, char **argv);
int cmd_prepare(int argc, char **argv);
int cmd_init(int argc, char **argv);
int cmd_scan(int argc, char **argv);
int cmd_archive(int argc, char **argv);
int cmd_unpack(int argc, char **argv);
int cmd_remove(int argc, char **argv);
int cmd_capture_test(int argc, char **argv);
int cmd_run(int argc, char **argv);
int cmd_cancel(int argc, char **argv);
int cmd_reset(int argc, char **argv);

#endif
