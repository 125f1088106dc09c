/* The loader of engines built outside the library (tmo/engine.h). */
#include <dlfcn.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "core/internal.h"
#include "tmo/engine.h"

/* Every enum tmo_cap bit there is; 1u << 3 is retired (tmo.h). */
#define KNOWN_CAPS                                                                      \
	(TMO_CAP_LOCKFREE_ARM | TMO_CAP_NO_SYSCALL | TMO_CAP_NO_ALLOC |                     \
	 TMO_CAP_CONCURRENT_CALLBACKS | TMO_CAP_THREAD_PER_TIMER | TMO_CAP_PARK |            \
	 TMO_CAP_RUN_ON_LOOP)
#define NAME_MAX_LEN 31

/* The deadlock check's calls are inline in the library (internal.h): an
 * outside engine reaches them through these. */
static uint64_t host_cb_begin(void) { return tmo__cb_begin(); }
static void host_cb_end(void) { tmo__cb_end(); }
static int host_wait_begin(uint64_t ref) { return tmo__wait_begin(ref); }
static void host_wait_end(void) { tmo__wait_end(); }

static const struct tmo_engine_host host = {
	TMO_ENGINE_ABI_VERSION, tmo__thread_enter, tmo__calloc, tmo__free, tmo__thread_create,
	host_cb_begin, host_cb_end, host_wait_begin, host_wait_end};

const char *tmo_load_errname(int err)
{
	switch (err) {
	case TMO_LOAD_OK: return "TMO_LOAD_OK";
	case TMO_LOAD_ENOFILE: return "TMO_LOAD_ENOFILE";
	case TMO_LOAD_EDLOPEN: return "TMO_LOAD_EDLOPEN";
	case TMO_LOAD_ENOSYM: return "TMO_LOAD_ENOSYM";
	case TMO_LOAD_EABI: return "TMO_LOAD_EABI";
	case TMO_LOAD_ETABLE: return "TMO_LOAD_ETABLE";
	default: return "TMO_LOAD_?";
	}
}

/* Writes the sentence (when there is room for one) and returns err. */
__attribute__((format(printf, 4, 5))) static int refuse(int err, char *why, size_t whylen,
                                                       const char *fmt, ...)
{
	if (why != NULL && whylen > 0) {
		va_list ap;
		va_start(ap, fmt);
		vsnprintf(why, whylen, fmt, ap);
		va_end(ap);
	}
	return err;
}

int tmo_engine_is_path(const char *word)
{
	size_t n = word == NULL ? 0 : strlen(word);
	return n > 0 && (strchr(word, '/') != NULL || (n > 3 && strcmp(word + n - 3, ".so") == 0));
}

static int check_name(const char *name, char *why, size_t whylen)
{
	if (name == NULL || name[0] == '\0')
		return refuse(TMO_LOAD_ETABLE, why, whylen, "the table has no name");
	size_t n = strlen(name);
	if (n > NAME_MAX_LEN)
		return refuse(TMO_LOAD_ETABLE, why, whylen, "the name '%.40s...' is longer than %d",
		              name, NAME_MAX_LEN);
	if (strspn(name, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-") != n)
		return refuse(TMO_LOAD_ETABLE, why, whylen,
		              "the name '%s' has a character outside [A-Za-z0-9_.-]", name);
	if (strcmp(name, "all") == 0 || tmo_engine_find(name) != NULL)
		return refuse(TMO_LOAD_ETABLE, why, whylen,
		              "the name '%s' is taken (a built-in engine, or 'all')", name);
	return 0;
}

int tmo_engine_check(const struct tmo_engine_ops *ops, char *why, size_t whylen)
{
	if (ops == NULL)
		return refuse(TMO_LOAD_ETABLE, why, whylen, "the table is NULL");
	int rc = check_name(ops->name, why, whylen);
	if (rc != 0)
		return rc;
	const char *null_slot = ops->summary == NULL ? "summary"
	                        : ops->create == NULL ? "create"
	                        : ops->destroy == NULL ? "destroy"
	                        : ops->arm == NULL    ? "arm"
	                        : ops->cancel == NULL ? "cancel"
	                        : ops->stats == NULL  ? "stats"
	                                              : NULL;
	if (null_slot != NULL)
		return refuse(TMO_LOAD_ETABLE, why, whylen, "engine '%s': the slot %s is NULL",
		              ops->name, null_slot);
	if ((ops->caps & ~(unsigned)KNOWN_CAPS) != 0)
		return refuse(TMO_LOAD_ETABLE, why, whylen,
		              "engine '%s': caps 0x%x has bits no enum tmo_cap names (0x%x)", ops->name,
		              ops->caps, ops->caps & ~(unsigned)KNOWN_CAPS);
	if (ops->resolution_ns <= 0 || ops->resolution_ns > TMO_NSEC_PER_SEC)
		return refuse(TMO_LOAD_ETABLE, why, whylen,
		              "engine '%s': resolution_ns %lld is not in 1..1e9", ops->name,
		              (long long)ops->resolution_ns);
	int park = ops->testing != NULL && ops->testing->park != NULL;
	if (park != ((ops->caps & TMO_CAP_PARK) != 0))
		return refuse(TMO_LOAD_ETABLE, why, whylen,
		              "engine '%s': %s", ops->name,
		              park ? "has a park hook but does not declare TMO_CAP_PARK"
		                   : "declares TMO_CAP_PARK but has no testing->park hook");
	return 0;
}

int tmo_engine_load(const char *path, const struct tmo_engine_ops **out, char *why,
                    size_t whylen)
{
	if (out == NULL || path == NULL)
		return refuse(TMO_LOAD_ENOFILE, why, whylen, "no path given");
	*out = NULL;
	if (access(path, F_OK) != 0)
		return refuse(TMO_LOAD_ENOFILE, why, whylen, "%s: no such file", path);
	/* dlopen reads a name without '/' from the library path: the harness
	 * promises a file, so a bare "x.so" is this directory's. */
	char rel[4096];
	if (strchr(path, '/') == NULL && snprintf(rel, sizeof rel, "./%s", path) < (int)sizeof rel)
		path = rel;
	void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (h == NULL)
		return refuse(TMO_LOAD_EDLOPEN, why, whylen, "dlopen: %s", dlerror());
	const struct tmo_engine_abi *abi = dlsym(h, TMO_ENGINE_SYMBOL);
	if (abi == NULL)
		return refuse(TMO_LOAD_ENOSYM, why, whylen,
		              "%s exports no symbol '%s' (TMO_ENGINE_EXPORT(ops) in tmo/engine.h)",
		              path, TMO_ENGINE_SYMBOL);
	if (abi->abi_version != TMO_ENGINE_ABI_VERSION || abi->ops_size != sizeof(struct tmo_engine_ops))
		return refuse(TMO_LOAD_EABI, why, whylen,
		              "%s was built for engine ABI %u (struct tmo_engine_ops of %u bytes); this "
		              "library is ABI %u (%zu bytes): rebuild it against these headers",
		              path, abi->abi_version, abi->ops_size, TMO_ENGINE_ABI_VERSION,
		              sizeof(struct tmo_engine_ops));
	if (abi->host == NULL)
		return refuse(TMO_LOAD_ETABLE, why, whylen, "%s: the ABI record has no host slot", path);
	int rc = tmo_engine_check(abi->ops, why, whylen);
	if (rc != 0)
		return rc;
	*abi->host = &host;
	*out = abi->ops;
	return 0;
}
