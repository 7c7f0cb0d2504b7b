/*
 * receiver/record.c — the run's screen recording (record.h).
 */
#include "record.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "relay_support/which.h"
#include "run_internal.h"

#define RECORD_FIRST_FRAME_WAIT_MS 3000 /* ffmpeg grabbed its first frame */
#define RECORD_QUIT_WAIT_MS        10000
#define RECORD_KILL_WAIT_MS        2000
#define RECORD_LOG_DIR             "video-logs"

const char *record_parse(run_ctx *ctx)
{
	jv *v = jv_get(ctx->req, RECEIVER_REQ_VIDEO);
	int64_t fps = 8;
	ctx->video = xcalloc(1, sizeof *ctx->video);
	ctx->video->stdin_fd = -1;
	if (v == NULL || jv_is(v, JV_NULL))
		return NULL;
	if (!jv_is(v, JV_OBJECT))
		return "unsupported request: video";
	if (jv_get(v, "fps") && (!jv_get_int(v, "fps", &fps) || fps < 1 || fps > RECEIVER_VIDEO_FPS_MAX))
		return "unsupported request: video.fps";
	if (jv_get(v, "display") && !jv_is(jv_get(v, "display"), JV_STRING) &&
	    !jv_is(jv_get(v, "display"), JV_NULL))
		return "unsupported request: video.display";
	ctx->video->requested = 1;
	ctx->video->fps = fps;
	return NULL;
}

#define off(v, ...) text_format((v)->reason, sizeof(v)->reason, __VA_ARGS__)

/* The last non-empty line of ffmpeg's log, for an "off" reason. */
static void log_tail(const char *log_path, char *out, size_t size)
{
	buf b;
	rerr err;
	int missing = 0, too_large = 0;
	out[0] = '\0';
	buf_init(&b);
	if (read_file_limited(log_path, 1u << 20, &b, &missing, &too_large, &err) == 0 && b.len) {
		size_t end = b.len;
		while (end && (b.data[end - 1] == '\n' || b.data[end - 1] == '\r'))
			end--;
		size_t start = end;
		while (start && b.data[start - 1] != '\n')
			start--;
		buf clean;
		buf_init(&clean);
		utf8_sanitize(&clean, b.data + start, end - start, 1);
		text_format(out, size, "%s", clean.data ? clean.data : "");
		buf_free(&clean);
	}
	buf_free(&b);
}

static const char *display_of(const run_ctx *ctx)
{
	const char *d = jv_get_str(jv_get(ctx->req, RECEIVER_REQ_VIDEO), "display");
	if (d && *d)
		return d;
	d = getenv("DISPLAY");
	return d && *d ? d : NULL;
}

static pid_t spawn_ffmpeg(run_ctx *ctx, const char *ffmpeg, const char *display, int *stdin_out,
                          const char *log_path)
{
	run_video *v = ctx->video;
	char fps[16];
	int in[2];
	snprintf(fps, sizeof fps, "%lld", (long long)v->fps);
	/* VP9 in real-time mode: a mostly still screen costs a few KiB a
	 * second, and the bitrate cap keeps a busy one near 2 MiB a minute. No
	 * look-ahead and every packet flushed: "q" ends the file within about
	 * 0.1 s. The input is probed with its first frame only (probesize 32
	 * bytes, no analysis), so ffmpeg creates the output file right after
	 * grabbing that frame, which it keeps for the file: record_await waits
	 * for the file's existence, not for the encoder's first bytes. */
	char *argv[] = {(char *)"ffmpeg",
	                (char *)"-hide_banner",
	                (char *)"-nostats",
	                (char *)"-loglevel",
	                (char *)"error",
	                (char *)"-f",
	                (char *)"x11grab",
	                (char *)"-draw_mouse",
	                (char *)"0",
	                (char *)"-framerate",
	                fps,
	                (char *)"-probesize",
	                (char *)"32",
	                (char *)"-analyzeduration",
	                (char *)"0",
	                (char *)"-fpsprobesize",
	                (char *)"0",
	                (char *)"-i",
	                (char *)display,
	                (char *)"-c:v",
	                (char *)"libvpx-vp9",
	                (char *)"-deadline",
	                (char *)"realtime",
	                (char *)"-cpu-used",
	                (char *)"8",
	                (char *)"-row-mt",
	                (char *)"1",
	                (char *)"-threads",
	                (char *)"1",
	                (char *)"-crf",
	                (char *)"40",
	                (char *)"-b:v",
	                (char *)"256k",
	                (char *)"-maxrate",
	                (char *)"280k",
	                (char *)"-bufsize",
	                (char *)"560k",
	                (char *)"-g",
	                (char *)"80",
	                (char *)"-lag-in-frames",
	                (char *)"0",
	                (char *)"-auto-alt-ref",
	                (char *)"0",
	                (char *)"-pix_fmt",
	                (char *)"yuv420p",
	                (char *)"-flush_packets",
	                (char *)"1",
	                (char *)"-f",
	                (char *)"webm",
	                v->partial_path,
	                NULL};
	if (pipe(in) != 0)
		return -1;
	pid_t pid = fork();
	if (pid == 0) {
		int log_fd = open(log_path, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW, 0600);
		int null_fd = open("/dev/null", O_WRONLY);
		setsid();
		dup2(in[0], 0);
		dup2(null_fd, 1);
		dup2(log_fd >= 0 ? log_fd : null_fd, 2);
		close(in[0]);
		close(in[1]);
		execv(ffmpeg, argv);
		_exit(127);
	}
	close(in[0]);
	if (pid < 0) {
		close(in[1]);
		return -1;
	}
	fcntl(in[1], F_SETFD, FD_CLOEXEC);
	*stdin_out = in[1];
	return pid;
}

static char *log_path_of(const run_ctx *ctx)
{
	char *rel = xasprintf("%s/%s.log", RECORD_LOG_DIR, ctx->execution_id);
	char *abs = path_join(ctx->root, rel);
	free(rel);
	return abs;
}

/* Waits until ffmpeg created its output file (it grabbed its first frame)
 * or ended. */
static int await_first_frame(run_video *v)
{
	int64_t until = mono_ms() + RECORD_FIRST_FRAME_WAIT_MS;
	struct stat st;
	while (mono_ms() < until) {
		if (stat(v->partial_path, &st) == 0)
			return 0;
		if (kill(v->pid, 0) != 0 || waitpid(v->pid, NULL, WNOHANG) == v->pid)
			return -1;
		sleep_ms(5);
	}
	return 0; /* slow, not failed: the recording may begin a little late */
}

void record_begin(run_ctx *ctx)
{
	run_video *v = ctx->video;
	rerr err;
	char *ffmpeg = NULL, *dir_rel = NULL, *dir_abs = NULL, *log_path = NULL;
	const char *display;
	if (v == NULL || !v->requested)
		return;
	display = display_of(ctx);
	if (display == NULL) {
		off(v, "the guest has no X display (DISPLAY is unset)");
		return;
	}
	ffmpeg = rs_which("ffmpeg", getenv("PATH"));
	if (ffmpeg == NULL) {
		off(v, "the image has no ffmpeg on PATH");
		return;
	}
	dir_rel = xasprintf("%s/%s", RECEIVER_VIDEOS_DIR, ctx->session_id);
	dir_abs = path_join(ctx->root, dir_rel);
	if (dir_ensure(ctx->root, dir_rel, &err) != 0 || dir_ensure(ctx->root, RECORD_LOG_DIR, &err) != 0) {
		off(v, "cannot make the recording's folder: %s", err.msg);
		goto cleanup;
	}
	v->file_name = xasprintf("%s.webm", ctx->execution_id);
	v->final_path = path_join(dir_abs, v->file_name);
	v->partial_path = xasprintf("%s/.partial-%s", dir_abs, v->file_name);
	unlink(v->partial_path);
	log_path = log_path_of(ctx);
	v->pid = spawn_ffmpeg(ctx, ffmpeg, display, &v->stdin_fd, log_path);
	if (v->pid <= 0) {
		v->pid = 0;
		off(v, "ffmpeg could not be started: %s", strerror(errno));
		goto cleanup;
	}
	ctx->spared = xrealloc(ctx->spared, (ctx->spared_count + 1) * sizeof(pid_t));
	ctx->spared[ctx->spared_count++] = v->pid;
cleanup:
	free(ffmpeg);
	free(dir_rel);
	free(dir_abs);
	free(log_path);
}

void record_await(run_ctx *ctx)
{
	run_video *v = ctx->video;
	if (v == NULL || v->pid <= 0)
		return;
	if (await_first_frame(v) != 0) {
		char *log_path = log_path_of(ctx);
		char tail[300];
		log_tail(log_path, tail, sizeof tail);
		free(log_path);
		v->pid = 0;
		close(v->stdin_fd);
		v->stdin_fd = -1;
		unlink(v->partial_path);
		off(v, "ffmpeg ended at once: %s", tail[0] ? tail : "no message");
		return;
	}
	/* the recording's clock starts at its first frame */
	timestamp_now(v->started_at);
	v->started_mono_ms = mono_ms();
}

/* 1 when pid ended within ms (reaped here, or by the receiver's reaping
 * of orphans: then it is gone too). *status_out: its wait status, or -1. */
static int wait_end(pid_t pid, int64_t ms, int *status_out)
{
	int64_t until = mono_ms() + ms;
	for (;;) {
		int status;
		pid_t w = waitpid(pid, &status, WNOHANG);
		if (w == pid) {
			*status_out = status;
			return 1;
		}
		if (w < 0 && errno == ECHILD) {
			*status_out = -1;
			return 1;
		}
		if (mono_ms() >= until)
			return 0;
		sleep_ms(10);
	}
}

void record_stop(run_ctx *ctx)
{
	run_video *v = ctx->video;
	if (v == NULL || v->pid <= 0 || v->stdin_fd < 0)
		return;
	timestamp_now(v->stopped_at);
	v->stopped_mono_ms = mono_ms();
	(void)!write(v->stdin_fd, "q", 1);
	close(v->stdin_fd);
	v->stdin_fd = -1;
}

void record_finish(run_ctx *ctx)
{
	run_video *v = ctx->video;
	int status = -1, fd;
	rerr err;
	if (v == NULL || v->pid <= 0)
		return;
	if (v->stdin_fd >= 0)
		record_stop(ctx);
	if (!wait_end(v->pid, RECORD_QUIT_WAIT_MS, &status)) {
		kill(v->pid, SIGINT);
		if (!wait_end(v->pid, RECORD_KILL_WAIT_MS, &status)) {
			kill(v->pid, SIGKILL);
			wait_end(v->pid, RECORD_KILL_WAIT_MS, &status);
			off(v, "ffmpeg did not stop when asked");
			v->pid = 0;
			unlink(v->partial_path);
			return;
		}
	}
	v->pid = 0;
	if (status != -1 && !(WIFEXITED(status) && WEXITSTATUS(status) == 0)) {
		char *log_path = log_path_of(ctx);
		char tail[300];
		log_tail(log_path, tail, sizeof tail);
		free(log_path);
		unlink(v->partial_path);
		off(v, "ffmpeg failed: %s", tail[0] ? tail : "no message");
		return;
	}
	if (rename(v->partial_path, v->final_path) != 0) {
		off(v, "the recording could not be moved into place: %s", strerror(errno));
		unlink(v->partial_path);
		return;
	}
	fd = open(v->final_path, O_RDONLY | O_NOFOLLOW);
	if (fd < 0 || hash_fd(fd, v->sha256, &v->bytes, &err) != 0 || v->bytes == 0 ||
	    v->bytes > RECEIVER_VIDEO_MAX_BYTES) {
		off(v, "the recording could not be read back or is empty");
		if (fd >= 0)
			close(fd);
		unlink(v->final_path);
		return;
	}
	fsx_fsync(fd);
	close(fd);
	v->recorded = 1;
}

jv *record_receipt_json(const run_ctx *ctx)
{
	const run_video *v = ctx->video;
	jv *o;
	if (v == NULL || !v->requested)
		return NULL;
	o = jv_object();
	if (!v->recorded) {
		jv_set_str(o, "status", "off");
		jv_set_str(o, "reason",
		           v->reason[0] ? v->reason : "the run ended before the recording began");
		return o;
	}
	jv_set_str(o, "status", "recorded");
	jv_set_str(o, "sessionId", ctx->session_id);
	jv_set_str(o, "executionId", ctx->execution_id);
	jv_set_str(o, "fileName", v->file_name);
	jv_set_str(o, "sha256", v->sha256);
	jv_set_int(o, "bytes", (int64_t)v->bytes);
	jv_set_str(o, "mimeType", "video/webm");
	jv_set_str(o, "startedAt", v->started_at);
	jv_set_str(o, "stoppedAt", v->stopped_at);
	jv_set_int(o, "durationMs", v->stopped_mono_ms - v->started_mono_ms);
	jv_set_int(o, "fps", v->fps);
	return o;
}

pid_t record_pid(const run_ctx *ctx)
{
	return ctx->video ? ctx->video->pid : 0;
}

void record_free(run_ctx *ctx)
{
	run_video *v = ctx->video;
	if (v == NULL)
		return;
	if (v->pid > 0) {
		int status;
		kill(v->pid, SIGKILL);
		wait_end(v->pid, RECORD_KILL_WAIT_MS, &status);
		unlink(v->partial_path);
	}
	if (v->stdin_fd >= 0)
		close(v->stdin_fd);
	free(v->partial_path);
	free(v->final_path);
	free(v->file_name);
	free(v);
	ctx->video = NULL;
}
