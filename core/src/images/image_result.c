/*
 * The answer of an image delivery (image_result.h; spec/images.md §3, §8).
 */
#include "images/image_result.h"

#include <stdlib.h>
#include <string.h>

#include "pixels/image.h"
#include "util/jsonx.h"
#include "util/strbuf.h"

void image_delivery_result_clear(image_delivery_result *r)
{
	if (r == NULL)
		return;
	json_object_put(r->image);
	json_object_put(r->presentation);
	free(r->diagnostic);
	free(r->preview_base64);
	memset(r, 0, sizeof *r);
}

json_object *image_delivery_json(const image_delivery_result *r)
{
	json_object *d = json_object_new_object();
	if (d == NULL)
		return NULL;
	jsonx_add_str(d, "status", r->status ? r->status : IMAGE_STATUS_TRANSFER_FAILED);
	if (r->image)
		jsonx_add(d, "image", json_object_get(r->image));
	if (r->diagnostic)
		jsonx_add_str(d, "diagnostic", r->diagnostic);
	else if (r->status == NULL)
		jsonx_add_str(d, "diagnostic", IMAGE_DIAG_UNEXPECTED);
	if (r->presentation)
		jsonx_add(d, "presentation", json_object_get(r->presentation));
	return d;
}

bool image_delivery_status_is_error(const char *status)
{
	return status == NULL ||
	       !(strcmp(status, IMAGE_STATUS_ATTACHED) == 0 || strcmp(status, IMAGE_STATUS_PENDING) == 0 ||
	         strcmp(status, IMAGE_STATUS_NOT_REQUESTED) == 0);
}

char *image_delivery_headline(const json_object *image_delivery, bool execution_failed)
{
	strbuf sb = STRBUF_INIT;
	strbuf_puts(&sb, "{\"imageDelivery\":");
	jsonx_write(&sb, image_delivery, 0);
	strbuf_printf(&sb, ",\"executionFailed\":%s}", execution_failed ? "true" : "false");
	if (!strbuf_ok(&sb)) {
		strbuf_free(&sb);
		return NULL;
	}
	return strbuf_detach(&sb, NULL);
}

char *image_delivery_phrase(const json_object *image_delivery, const char *what)
{
	const char *status = jsonx_get_str(image_delivery, "status");
	const char *id = jsonx_get_str(jsonx_get_obj(image_delivery, "image"), "imageId");
	strbuf sb = STRBUF_INIT;
	if (status == NULL)
		strbuf_printf(&sb, "%s unknown", what);
	else if (strcmp(status, IMAGE_STATUS_NOT_REQUESTED) == 0)
		strbuf_printf(&sb, "no %s (not requested)", what);
	else
		strbuf_printf(&sb, "%s %s", what, status);
	/* "image-" and the first 8 hex digits name it well enough in a sentence. */
	if (id && strlen(id) > 14)
		strbuf_printf(&sb, " (%.14s…)", id);
	else if (id)
		strbuf_printf(&sb, " (%s)", id);
	if (!strbuf_ok(&sb)) {
		strbuf_free(&sb);
		return NULL;
	}
	return strbuf_detach(&sb, NULL);
}

bool image_delivery_take_preview(image_delivery_result *r, char **base64_io, char **mime_io)
{
	if (r == NULL || r->preview_base64 == NULL)
		return true;
	char *mime = strdup(r->preview_mime ? r->preview_mime : IMAGE_MIME_PNG);
	if (mime == NULL)
		return false;
	free(*base64_io);
	free(*mime_io);
	*base64_io = r->preview_base64;
	*mime_io = mime;
	r->preview_base64 = NULL;
	return true;
}

json_object *image_delivery_capability_json(void)
{
	json_object *c = json_object_new_object();
	jsonx_add_int(c, "version", 1);
	jsonx_add_str(c, "action", "image");
	json_object *sources = json_object_new_array();
	json_object_array_add(sources, json_object_new_string("display"));
	json_object_array_add(sources, json_object_new_string("application"));
	json_object_array_add(sources, json_object_new_string("reference"));
	jsonx_add(c, "sources", sources);
	jsonx_add_int(c, "deadlineMs", IMAGE_DELIVERY_DEADLINE_MS);
	jsonx_add_int(c, "transferAttempts", IMAGE_DELIVERY_ATTEMPTS);
	jsonx_add_int(c, "recommendedRecoveryCalls", IMAGE_DELIVERY_RECOVERY_CALLS);
	return c;
}
