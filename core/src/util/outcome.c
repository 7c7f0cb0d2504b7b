#include "util/outcome.h"

#include <stdarg.h>
#include <stdlib.h>

#include "util/strbuf.h"

json_object *outcome_facts(relay_outcome *o)
{
	if (o->facts == NULL)
		o->facts = json_object_new_object();
	return o->facts;
}

int outcome_fail(relay_outcome *o, const char *code, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	free(o->message);
	o->message = strbuf_vformat(fmt, ap);
	va_end(ap);
	o->code = code ? code : "internal";
	(void)outcome_facts(o);
	return -1;
}

bool outcome_failed(const relay_outcome *o)
{
	return o->code != NULL;
}

json_object *outcome_take_facts(relay_outcome *o)
{
	json_object *facts = outcome_facts(o);
	o->facts = NULL;
	return facts;
}

void outcome_free(relay_outcome *o)
{
	free(o->message);
	json_object_put(o->facts);
	o->code = NULL;
	o->message = NULL;
	o->facts = NULL;
}
