/*
 * The nginx data plane's hot path (decision 0027): an app route's request is
 * authorized from a grant this worker keeps, counted against the route's
 * connection limits, proxied to the grant's address over kept-alive connections,
 * and the route's bridged secret is masked in every response.
 *
 * The portal decides (apps.proxy.authrequest); gpuaas.lua asks it, in the named
 * location `gpuaas_route` names, whenever this worker has no fresh grant for the
 * request, and hands the answer here (ngx_http_gpuaas_grant). Everything a
 * request does with a grant is in this file, whichever way it came.
 *
 * Directives:
 *   gpuaas_connections_zone SIZE;   http: the shared counts of open connections
 *   gpuaas_grants_per_worker N;     http: how many grants a worker keeps (4096)
 *   gpuaas_route @LOCATION;         location: authorize, or ask in @LOCATION
 *   gpuaas_balancer;                upstream: connect to the grant's address
 * Variables: $g_upstream $g_public $g_from $g_forwarded $g_frame (the grant's),
 * $g_uri $g_cookie $g_auth $g_masked $g_range $g_ranged (the request's, under
 * the grant) and $g_route (the request's route cookie).
 */

#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>


/* The grant's values, in the order the stored form holds them (gpuaas.lua HEADERS). */
enum {
    G_UPSTREAM, G_PUBLIC, G_FROM, G_FORWARDED, G_FRAME, G_UPSTREAM_PREFIX,
    G_AUTHORIZATION, G_PASSTHROUGH, G_ADDRESSES, G_INSTANCE, G_INSTANCE_LIMIT,
    G_USER, G_USER_LIMIT, G_SECRET, G_VALUES
};

#define GPUAAS_MAX_ADDRESSES  8
#define GPUAAS_CACHE_BUCKETS  1024


typedef struct {
    struct sockaddr  *sockaddr;
    socklen_t         socklen;
    ngx_str_t         name;
} ngx_http_gpuaas_peer_t;


/* A grant, parsed once and kept by this worker while fresh; requests hold it by
 * reference, so one that outlives its place in the cache frees it last. */
typedef struct ngx_http_gpuaas_grant_s  ngx_http_gpuaas_grant_t;

struct ngx_http_gpuaas_grant_s {
    ngx_http_gpuaas_grant_t  *next;            /* in its cache bucket */
    ngx_uint_t                refs;
    ngx_uint_t                cached;
    ngx_uint_t                hash;
    ngx_str_t                 key;
    uint64_t                  fresh_until;     /* epoch milliseconds */
    ngx_str_t                 value[G_VALUES];
    ngx_str_t                 instance_key;
    ngx_str_t                 user_key;
    uint32_t                  instance_hash;   /* ngx_str_rbtree_lookup's */
    uint32_t                  user_hash;
    ngx_uint_t                instance_limit;
    ngx_uint_t                user_limit;
    unsigned                  passthrough:1;
    ngx_uint_t                npeers;
    ngx_http_gpuaas_peer_t    peer[GPUAAS_MAX_ADDRESSES];
    ngx_sockaddr_t            sockaddr[GPUAAS_MAX_ADDRESSES];
    u_char                    data[1];         /* the key, the stored form, peer names */
};


typedef struct {
    ngx_rbtree_t       rbtree;
    ngx_rbtree_node_t  sentinel;
} ngx_http_gpuaas_shctx_t;


typedef struct {
    ngx_str_node_t  sn;
    ngx_uint_t      count;
    u_char          data[1];
} ngx_http_gpuaas_count_t;


typedef struct {
    ngx_shm_zone_t           *zone;
    ngx_http_gpuaas_shctx_t  *sh;
    ngx_slab_pool_t          *shpool;
    ngx_uint_t                grants_max;
} ngx_http_gpuaas_main_conf_t;


typedef struct {
    ngx_str_t  ask;         /* the named location; empty: not an app route */
} ngx_http_gpuaas_loc_conf_t;


typedef struct {
    ngx_http_gpuaas_grant_t  *grant;
    ngx_str_t                 uri;       /* upstream path when it differs */
    ngx_str_t                 cookie;    /* the app's cookies */
    ngx_str_t                 auth;
    ngx_str_t                 range;     /* the widened Range asked upstream */
    off_t                     first;     /* the browser's range: first-last, */
    off_t                     last;      /* or the last `suffix` bytes */
    off_t                     suffix;
    off_t                     left;      /* app body bytes still to come; -1: unknown */
    off_t                     skip;      /* cut(): bytes to drop, then to keep */
    off_t                     keep;
    u_char                   *held;      /* a chunk's end that could begin the secret */
    size_t                    nheld;
    ngx_uint_t                tries;
    unsigned                  asked:1;
    unsigned                  cutting:1;
    unsigned                  ranged:1;
} ngx_http_gpuaas_ctx_t;


typedef struct {
    ngx_http_gpuaas_main_conf_t  *gmcf;
    ngx_http_gpuaas_grant_t      *grant;
} ngx_http_gpuaas_release_t;


static ngx_int_t ngx_http_gpuaas_init(ngx_conf_t *cf);
static ngx_int_t ngx_http_gpuaas_add_variables(ngx_conf_t *cf);
static void *ngx_http_gpuaas_create_main_conf(ngx_conf_t *cf);
static char *ngx_http_gpuaas_init_main_conf(ngx_conf_t *cf, void *conf);
static void *ngx_http_gpuaas_create_loc_conf(ngx_conf_t *cf);
static char *ngx_http_gpuaas_merge_loc_conf(ngx_conf_t *cf, void *parent,
    void *child);
static char *ngx_http_gpuaas_zone(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);
static char *ngx_http_gpuaas_balancer(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);
static ngx_int_t ngx_http_gpuaas_apply(ngx_http_request_t *r,
    ngx_http_gpuaas_grant_t *grant);


static ngx_command_t  ngx_http_gpuaas_commands[] = {

    { ngx_string("gpuaas_connections_zone"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE1,
      ngx_http_gpuaas_zone,
      NGX_HTTP_MAIN_CONF_OFFSET,
      0,
      NULL },

    { ngx_string("gpuaas_grants_per_worker"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_num_slot,
      NGX_HTTP_MAIN_CONF_OFFSET,
      offsetof(ngx_http_gpuaas_main_conf_t, grants_max),
      NULL },

    { ngx_string("gpuaas_route"),
      NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_str_slot,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_gpuaas_loc_conf_t, ask),
      NULL },

    { ngx_string("gpuaas_balancer"),
      NGX_HTTP_UPS_CONF|NGX_CONF_NOARGS,
      ngx_http_gpuaas_balancer,
      0,
      0,
      NULL },

      ngx_null_command
};


static ngx_http_module_t  ngx_http_gpuaas_module_ctx = {
    ngx_http_gpuaas_add_variables,         /* preconfiguration */
    ngx_http_gpuaas_init,                  /* postconfiguration */
    ngx_http_gpuaas_create_main_conf,      /* create main configuration */
    ngx_http_gpuaas_init_main_conf,        /* init main configuration */
    NULL,                                  /* create server configuration */
    NULL,                                  /* merge server configuration */
    ngx_http_gpuaas_create_loc_conf,       /* create location configuration */
    ngx_http_gpuaas_merge_loc_conf         /* merge location configuration */
};


ngx_module_t  ngx_http_gpuaas_module = {
    NGX_MODULE_V1,
    &ngx_http_gpuaas_module_ctx,           /* module context */
    ngx_http_gpuaas_commands,              /* module directives */
    NGX_HTTP_MODULE,                       /* module type */
    NULL,                                  /* init master */
    NULL,                                  /* init module */
    NULL,                                  /* init process */
    NULL,                                  /* init thread */
    NULL,                                  /* exit thread */
    NULL,                                  /* exit process */
    NULL,                                  /* exit master */
    NGX_MODULE_V1_PADDING
};


static ngx_http_output_header_filter_pt  ngx_http_next_header_filter;
static ngx_http_output_body_filter_pt    ngx_http_next_body_filter;

/* This worker's fresh grants, by key. */
static ngx_http_gpuaas_grant_t  *ngx_http_gpuaas_cache[GPUAAS_CACHE_BUCKETS];
static ngx_uint_t                ngx_http_gpuaas_cached;

static ngx_str_t  ngx_http_gpuaas_route_cookie = ngx_string("_gpuaas_route");
static ngx_str_t  ngx_http_gpuaas_one = ngx_string("1");


/* A hash of a key, eight bytes at a time: keys hold a route cookie, and nginx's
 * ngx_hash_key, a byte at a time, cost some 2k instructions a request on them. */
static ngx_uint_t
ngx_http_gpuaas_hash(u_char *p, size_t len)
{
    uint64_t  h, word;

    h = 0x9e3779b97f4a7c15ULL ^ len;

    for (/* void */; len >= 8; p += 8, len -= 8) {
        ngx_memcpy(&word, p, 8);
        h = (h ^ word) * 0xff51afd7ed558ccdULL;
        h ^= h >> 32;
    }

    word = 0;
    ngx_memcpy(&word, p, len);
    h = (h ^ word) * 0xc4ceb9fe1a85ec53ULL;
    h ^= h >> 29;

    return (ngx_uint_t) h;
}


/* --- Cookies ------------------------------------------------------------------ */

/* The route cookie's value, found as nginx's $cookie__gpuaas_route finds it, so the
 * portal is asked about the very value a grant is kept under (portal.conf sends
 * $g_route). */
static ngx_int_t
ngx_http_gpuaas_route(ngx_http_request_t *r, ngx_str_t *value)
{
    ngx_uint_t        i;
    u_char           *start, *end, ch;
    ngx_str_t        *name;
    ngx_table_elt_t **h;

    name = &ngx_http_gpuaas_route_cookie;
    h = r->headers_in.cookies.elts;

    for (i = 0; i < r->headers_in.cookies.nelts; i++) {
        start = h[i]->value.data;
        end = start + h[i]->value.len;

        while (start < end) {
            if (end - start > (ssize_t) name->len
                && ngx_strncasecmp(start, name->data, name->len) == 0)
            {
                for (start += name->len; start < end && *start == ' '; start++) {
                    /* void */
                }

                if (start < end && *start++ == '=') {
                    while (start < end && *start == ' ') {
                        start++;
                    }

                    value->data = start;
                    if (start < end) {
                        start = memchr(start, ';', end - start);
                        start = start ? start : end;
                    }
                    while (start > value->data && start[-1] == ' ') {
                        start--;
                    }
                    value->len = start - value->data;
                    return NGX_OK;
                }
            }

            while (start < end) {
                ch = *start++;
                if (ch == ';' || ch == ',') {
                    break;
                }
            }
            while (start < end && *start == ' ') {
                start++;
            }
        }
    }

    ngx_str_null(value);
    return NGX_DECLINED;
}


static ngx_uint_t
ngx_http_gpuaas_is_space(u_char ch)
{
    return ch == ' ' || ch == '\t' || ch == '\r' || ch == '\n' || ch == '\f'
           || ch == '\v';
}


/* Whether the cookie at p (after spaces) is one of the platform's. */
static ngx_uint_t
ngx_http_gpuaas_platform_cookie(u_char *p, u_char *end)
{
    static ngx_str_t  platform[] = {
        ngx_string("_gpuaas_route="), ngx_string("sessionid="),
        ngx_string("csrftoken=")
    };

    ngx_uint_t  k;

    while (p < end && ngx_http_gpuaas_is_space(*p)) {
        p++;
    }

    for (k = 0; k < sizeof(platform) / sizeof(platform[0]); k++) {
        if ((size_t) (end - p) >= platform[k].len
            && ngx_strncmp(p, platform[k].data, platform[k].len) == 0)
        {
            return 1;
        }
    }

    return 0;
}


/* The app's own cookies: the Cookie headers (joined by "; ", as $http_cookie) less
 * the platform's (route session, portal session, CSRF token), which never reach an
 * app: what removing (?:^|;)\s*(?:_gpuaas_route|sessionid|csrftoken)=[^;]* and
 * then a leading ";\s*" leaves. */
static ngx_int_t
ngx_http_gpuaas_app_cookies(ngx_http_request_t *r, ngx_str_t *out)
{
    size_t            len;
    u_char           *p, *end, *from, *next, *q;
    ngx_uint_t        i;
    ngx_table_elt_t **h;

    h = r->headers_in.cookies.elts;
    ngx_str_null(out);

    /* One cookie (an app host's usual case: the route cookie alone) */
    if (r->headers_in.cookies.nelts == 1
        && memchr(h[0]->value.data, ';', h[0]->value.len) == NULL)
    {
        if (!ngx_http_gpuaas_platform_cookie(h[0]->value.data,
                                             h[0]->value.data
                                             + h[0]->value.len))
        {
            *out = h[0]->value;
        }
        return NGX_OK;
    }

    len = 0;
    for (i = 0; i < r->headers_in.cookies.nelts; i++) {
        len += h[i]->value.len + 2;
    }

    if (len == 0) {
        return NGX_OK;
    }

    p = ngx_pnalloc(r->pool, len);
    if (p == NULL) {
        return NGX_ERROR;
    }

    end = p;
    for (i = 0; i < r->headers_in.cookies.nelts; i++) {
        if (i) {
            *end++ = ';';
            *end++ = ' ';
        }
        end = ngx_cpymem(end, h[i]->value.data, h[i]->value.len);
    }

    /* In place: each cookie runs from the start or a ';' to the next ';' (not
     * included), `q` writes those kept. */
    q = p;
    for (from = p; from < end; from = next) {
        next = (from == p && *from != ';') ? from : from + 1;
        if (!ngx_http_gpuaas_platform_cookie(next, end)) {
            next = memchr(next, ';', end - next);
            next = next ? next : end;
            q = ngx_movemem(q, from, next - from);
            continue;
        }
        next = memchr(next, ';', end - next);
        next = next ? next : end;
    }

    from = p;
    if (from < q && *from == ';') {
        from++;
        while (from < q && ngx_http_gpuaas_is_space(*from)) {
            from++;
        }
    }

    out->data = from;
    out->len = q - from;
    return NGX_OK;
}


/* --- The grant's key and the worker's cache ------------------------------------ */

/* On the portal's host, the route's path (/w/{instance}/{endpoint}/). */
static void
ngx_http_gpuaas_route_path(ngx_str_t *uri, ngx_str_t *path)
{
    u_char  *p, *end, *instance_end, *endpoint_end;

    ngx_str_null(path);
    p = uri->data;
    end = p + uri->len;

    if (uri->len < 3 || ngx_strncmp(p, "/w/", 3) != 0) {
        return;
    }

    instance_end = ngx_strlchr(p + 3, end, '/');
    if (instance_end == NULL || instance_end == p + 3) {
        return;
    }

    endpoint_end = ngx_strlchr(instance_end + 1, end, '/');
    if (endpoint_end == NULL || endpoint_end == instance_end + 1) {
        return;
    }

    if (ngx_strlchr(p + 3, endpoint_end, '?') != NULL) {
        return;
    }

    path->data = p;
    path->len = endpoint_end + 1 - p;
}


/* The grant's key: route cookie, host and, on the portal's host, the route's path.
 * Also gpuaas.lua's (through LuaJIT's FFI): 0, or -1 when out of memory. */
int
ngx_http_gpuaas_key(ngx_http_request_t *r, u_char **data, size_t *len)
{
    u_char     *p;
    ngx_str_t   route, host, path;

    (void) ngx_http_gpuaas_route(r, &route);
    host = r->headers_in.server;
    ngx_http_gpuaas_route_path(&r->unparsed_uri, &path);

    p = ngx_pnalloc(r->pool, route.len + host.len + path.len + 2);
    if (p == NULL) {
        return NGX_ERROR;
    }

    *data = p;
    p = ngx_cpymem(p, route.data, route.len);
    *p++ = '|';
    p = ngx_cpymem(p, host.data, host.len);
    *p++ = '|';
    p = ngx_cpymem(p, path.data, path.len);
    *len = p - *data;

    return NGX_OK;
}


static void
ngx_http_gpuaas_unref(ngx_http_gpuaas_grant_t *grant)
{
    if (--grant->refs == 0 && !grant->cached) {
        ngx_free(grant);
    }
}


static void
ngx_http_gpuaas_forget_all(void)
{
    ngx_uint_t                i;
    ngx_http_gpuaas_grant_t  *grant, *next;

    for (i = 0; i < GPUAAS_CACHE_BUCKETS; i++) {
        for (grant = ngx_http_gpuaas_cache[i]; grant; grant = next) {
            next = grant->next;
            grant->cached = 0;
            if (grant->refs == 0) {
                ngx_free(grant);
            }
        }
        ngx_http_gpuaas_cache[i] = NULL;
    }

    ngx_http_gpuaas_cached = 0;
}


static ngx_http_gpuaas_grant_t *
ngx_http_gpuaas_find(ngx_uint_t hash, u_char *key, size_t len,
    ngx_http_gpuaas_grant_t ***at)
{
    ngx_http_gpuaas_grant_t  **link, *grant;

    link = &ngx_http_gpuaas_cache[hash % GPUAAS_CACHE_BUCKETS];
    for (grant = *link; grant; link = &grant->next, grant = *link) {
        if (grant->hash == hash && grant->key.len == len
            && ngx_memcmp(grant->key.data, key, len) == 0)
        {
            break;
        }
    }

    if (at) {
        *at = link;
    }

    return grant;
}


static void
ngx_http_gpuaas_remember(ngx_http_gpuaas_grant_t *grant, ngx_uint_t max)
{
    ngx_http_gpuaas_grant_t  **link, *old;

    old = ngx_http_gpuaas_find(grant->hash, grant->key.data, grant->key.len,
                               &link);
    if (old) {
        *link = old->next;
        old->cached = 0;
        ngx_http_gpuaas_cached--;
        if (old->refs == 0) {
            ngx_free(old);
        }
    }

    if (ngx_http_gpuaas_cached >= max) {
        ngx_http_gpuaas_forget_all();
    }

    link = &ngx_http_gpuaas_cache[grant->hash % GPUAAS_CACHE_BUCKETS];
    grant->next = *link;
    *link = grant;
    grant->cached = 1;
    ngx_http_gpuaas_cached++;
}


static uint64_t
ngx_http_gpuaas_now(void)
{
    ngx_time_t  *tp;

    tp = ngx_timeofday();
    return (uint64_t) tp->sec * 1000 + tp->msec;
}


/* --- Parsing a grant --------------------------------------------------------- */

static ngx_int_t
ngx_http_gpuaas_parse_addr(u_char *text, size_t len, ngx_sockaddr_t *sa,
    socklen_t *socklen)
{
    u_char  buf[NGX_INET6_ADDRSTRLEN + 1];

    if (len == 0 || len > NGX_INET6_ADDRSTRLEN) {
        return NGX_ERROR;
    }

    ngx_memcpy(buf, text, len);
    buf[len] = '\0';
    ngx_memzero(sa, sizeof(ngx_sockaddr_t));

    if (inet_pton(AF_INET, (char *) buf, &sa->sockaddr_in.sin_addr) == 1) {
        sa->sockaddr_in.sin_family = AF_INET;
        *socklen = sizeof(struct sockaddr_in);
        return NGX_OK;
    }

#if (NGX_HAVE_INET6)
    if (inet_pton(AF_INET6, (char *) buf, &sa->sockaddr_in6.sin6_addr) == 1) {
        sa->sockaddr_in6.sin6_family = AF_INET6;
        *socklen = sizeof(struct sockaddr_in6);
        return NGX_OK;
    }
#endif

    return NGX_ERROR;
}


/* The peers: the upstream's port (host:port) at each of its resolved addresses. */
static ngx_int_t
ngx_http_gpuaas_peers(ngx_http_gpuaas_grant_t *grant, u_char *names)
{
    u_char                  *p, *end, *start, *stop;
    socklen_t                socklen;
    ngx_int_t                port;
    ngx_str_t               *upstream, *addresses;
    ngx_http_gpuaas_peer_t  *peer;

    upstream = &grant->value[G_UPSTREAM];
    end = upstream->data + upstream->len;
    for (p = end; p > upstream->data && p[-1] != ':'; p--) {
        /* void */
    }
    port = (p > upstream->data) ? ngx_atoi(p, end - p) : NGX_ERROR;
    if (port < 1 || port > 65535) {
        return NGX_ERROR;
    }

    addresses = &grant->value[G_ADDRESSES];
    p = addresses->data;
    end = p + addresses->len;
    grant->npeers = 0;

    while (p < end && grant->npeers < GPUAAS_MAX_ADDRESSES) {
        while (p < end && *p == ' ') {
            p++;
        }
        start = p;
        while (p < end && *p != ' ') {
            p++;
        }
        if (p == start) {
            break;
        }

        stop = p;
        if (*start == '[' && stop[-1] == ']') {
            start++;
            stop--;
        }

        if (ngx_http_gpuaas_parse_addr(start, stop - start,
                                       &grant->sockaddr[grant->npeers],
                                       &socklen)
            != NGX_OK)
        {
            return NGX_ERROR;
        }

        peer = &grant->peer[grant->npeers++];
        peer->sockaddr = &grant->sockaddr[grant->npeers - 1].sockaddr;
        peer->socklen = socklen;
        ngx_inet_set_port(peer->sockaddr, (in_port_t) port);
        peer->name.data = names;
        peer->name.len = ngx_sock_ntop(peer->sockaddr, socklen, names,
                                       NGX_SOCKADDR_STRLEN, 1);
        names += NGX_SOCKADDR_STRLEN;
    }

    return grant->npeers ? NGX_OK : NGX_ERROR;
}


static ngx_int_t
ngx_http_gpuaas_number(ngx_str_t *value, ngx_uint_t *n)
{
    ngx_int_t  v;

    v = ngx_atoi(value->data, value->len);
    if (v == NGX_ERROR) {
        return NGX_ERROR;
    }

    *n = (ngx_uint_t) v;
    return NGX_OK;
}


/* The stored form gpuaas.lua keeps in shared memory: its FORMAT line (checked
 * there), the epoch milliseconds until which it is fresh, then the grant's values,
 * one a line. NULL when it does not parse; the caller says why. */
static ngx_http_gpuaas_grant_t *
ngx_http_gpuaas_parse(u_char *key, size_t key_len, u_char *stored, size_t len)
{
    size_t                    size;
    u_char                   *p, *end, *line, *names;
    ngx_int_t                 i;
    ngx_uint_t                v;
    ngx_http_gpuaas_grant_t  *grant;

    /* the key, the stored form, the count keys (values of the stored form) */
    size = sizeof(ngx_http_gpuaas_grant_t) + key_len + 2 * len
           + sizeof("instance:") + sizeof("user:")
           + GPUAAS_MAX_ADDRESSES * NGX_SOCKADDR_STRLEN;

    grant = ngx_alloc(size, ngx_cycle->log);
    if (grant == NULL) {
        return NULL;
    }
    ngx_memzero(grant, sizeof(ngx_http_gpuaas_grant_t));

    p = grant->data;
    grant->key.data = p;
    grant->key.len = key_len;
    p = ngx_cpymem(p, key, key_len);
    grant->hash = ngx_http_gpuaas_hash(key, key_len);

    line = p;
    end = ngx_cpymem(p, stored, len);

    /* FORMAT, then fresh-until */
    for (i = -2; i < G_VALUES; i++) {
        p = ngx_strlchr(line, end, '\n');
        if (p == NULL) {
            if (i != G_VALUES - 1) {
                goto invalid;
            }
            p = end;
        }

        if (i == -1) {
            if (ngx_http_gpuaas_number(&(ngx_str_t) { p - line, line }, &v)
                != NGX_OK)
            {
                goto invalid;
            }
            grant->fresh_until = v;

        } else if (i >= 0) {
            grant->value[i].data = line;
            grant->value[i].len = p - line;
        }

        line = p + 1;
    }

    grant->passthrough = grant->value[G_PASSTHROUGH].len == 1
                         && grant->value[G_PASSTHROUGH].data[0] == '1';

    if (ngx_http_gpuaas_number(&grant->value[G_INSTANCE_LIMIT],
                               &grant->instance_limit) != NGX_OK
        || ngx_http_gpuaas_number(&grant->value[G_USER_LIMIT],
                                  &grant->user_limit) != NGX_OK)
    {
        goto invalid;
    }

    p = end;
    grant->instance_key.data = p;
    p = ngx_cpymem(p, "instance:", sizeof("instance:") - 1);
    p = ngx_cpymem(p, grant->value[G_INSTANCE].data,
                   grant->value[G_INSTANCE].len);
    grant->instance_key.len = p - grant->instance_key.data;

    grant->user_key.data = p;
    p = ngx_cpymem(p, "user:", sizeof("user:") - 1);
    p = ngx_cpymem(p, grant->value[G_USER].data, grant->value[G_USER].len);
    grant->user_key.len = p - grant->user_key.data;
    grant->instance_hash = (uint32_t) ngx_http_gpuaas_hash(
                               grant->instance_key.data, grant->instance_key.len);
    grant->user_hash = (uint32_t) ngx_http_gpuaas_hash(grant->user_key.data,
                                                       grant->user_key.len);

    names = p;
    if (ngx_http_gpuaas_peers(grant, names) != NGX_OK) {
        goto invalid;
    }

    return grant;

invalid:

    ngx_free(grant);
    return NULL;
}


/* --- Connection counts ------------------------------------------------------- */

/* Open connections per app instance and per user, in shared memory so the limits
 * hold across workers. A key at 0 stays, so that a request does not allocate and
 * free its keys each time; those at 0 are swept when the zone is full. */
static void
ngx_http_gpuaas_sweep_locked(ngx_http_gpuaas_main_conf_t *gmcf)
{
    ngx_rbtree_t             *tree;
    ngx_rbtree_node_t        *node, *next;
    ngx_http_gpuaas_count_t  *count;

    tree = &gmcf->sh->rbtree;
    if (tree->root == tree->sentinel) {
        return;
    }

    for (node = ngx_rbtree_min(tree->root, tree->sentinel); node; node = next) {
        next = ngx_rbtree_next(tree, node);
        count = (ngx_http_gpuaas_count_t *) node;
        if (count->count == 0) {
            ngx_rbtree_delete(tree, node);
            ngx_slab_free_locked(gmcf->shpool, count);
        }
    }
}


static ngx_http_gpuaas_count_t *
ngx_http_gpuaas_count_node(ngx_http_gpuaas_main_conf_t *gmcf, ngx_str_t *key,
    uint32_t hash, ngx_uint_t create)
{
    size_t                    size;
    ngx_http_gpuaas_count_t  *node;

    node = (ngx_http_gpuaas_count_t *)
           ngx_str_rbtree_lookup(&gmcf->sh->rbtree, key, hash);

    if (node || !create) {
        return node;
    }

    size = sizeof(ngx_http_gpuaas_count_t) + key->len;
    node = ngx_slab_alloc_locked(gmcf->shpool, size);
    if (node == NULL) {
        ngx_http_gpuaas_sweep_locked(gmcf);
        node = ngx_slab_alloc_locked(gmcf->shpool, size);
        if (node == NULL) {
            return NULL;
        }
    }

    node->sn.node.key = hash;
    node->sn.str.len = key->len;
    node->sn.str.data = node->data;
    ngx_memcpy(node->data, key->data, key->len);
    node->count = 0;
    ngx_rbtree_insert(&gmcf->sh->rbtree, &node->sn.node);

    return node;
}


static void
ngx_http_gpuaas_release(void *data)
{
    ngx_http_gpuaas_release_t    *release = data;
    ngx_http_gpuaas_grant_t      *grant;
    ngx_http_gpuaas_count_t      *node;
    ngx_http_gpuaas_main_conf_t  *gmcf;

    gmcf = release->gmcf;
    grant = release->grant;

    ngx_shmtx_lock(&gmcf->shpool->mutex);
    node = ngx_http_gpuaas_count_node(gmcf, &grant->instance_key,
                                      grant->instance_hash, 0);
    if (node && node->count) {
        node->count--;
    }
    node = ngx_http_gpuaas_count_node(gmcf, &grant->user_key, grant->user_hash,
                                      0);
    if (node && node->count) {
        node->count--;
    }
    ngx_shmtx_unlock(&gmcf->shpool->mutex);

    ngx_http_gpuaas_unref(grant);
}


/* Counts the request on its instance and its user, or on neither when either is at
 * its limit (429). Given back when the request is freed, however it ended: the
 * app's response, an error page, the browser leaving, a WebSocket closing. */
static ngx_int_t
ngx_http_gpuaas_count(ngx_http_request_t *r, ngx_http_gpuaas_grant_t *grant)
{
    ngx_int_t                     rc;
    ngx_pool_cleanup_t           *cln;
    ngx_http_gpuaas_count_t      *instance, *user;
    ngx_http_gpuaas_release_t    *release;
    ngx_http_gpuaas_main_conf_t  *gmcf;

    gmcf = ngx_http_get_module_main_conf(r, ngx_http_gpuaas_module);
    if (gmcf->sh == NULL) {
        ngx_log_error(NGX_LOG_ERR, r->connection->log, 0,
                      "gpuaas_connections_zone is not set");
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    cln = ngx_pool_cleanup_add(r->pool, sizeof(ngx_http_gpuaas_release_t));
    if (cln == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    ngx_shmtx_lock(&gmcf->shpool->mutex);

    instance = ngx_http_gpuaas_count_node(gmcf, &grant->instance_key,
                                          grant->instance_hash, 1);
    if (instance) {
        instance->count++;
    }
    user = ngx_http_gpuaas_count_node(gmcf, &grant->user_key, grant->user_hash,
                                      1);
    if (user) {
        user->count++;
    }

    if (instance == NULL || user == NULL) {
        rc = NGX_HTTP_SERVICE_UNAVAILABLE;

    } else if (instance->count > grant->instance_limit
               || user->count > grant->user_limit)
    {
        rc = NGX_HTTP_TOO_MANY_REQUESTS;

    } else {
        rc = NGX_OK;
    }

    if (rc != NGX_OK) {
        if (instance) {
            instance->count--;
        }
        if (user) {
            user->count--;
        }
    }

    ngx_shmtx_unlock(&gmcf->shpool->mutex);

    if (rc == NGX_HTTP_SERVICE_UNAVAILABLE) {
        ngx_log_error(NGX_LOG_ERR, r->connection->log, 0,
                      "gpuaas_connections_zone is full");
    }

    if (rc != NGX_OK) {
        return rc;
    }

    release = cln->data;
    release->gmcf = gmcf;
    release->grant = grant;
    grant->refs++;
    cln->handler = ngx_http_gpuaas_release;

    return NGX_OK;
}


/* --- Applying a grant to a request --------------------------------------------- */

/* The path sent upstream, from the raw request URI and the route's prefixes
 * (apps.proxy.access.Target.upstream_path): on a path_prefix route the public
 * prefix is replaced by the upstream's; on an app host a path already under the
 * upstream's prefix is kept, any other is put under it. Empty: the path as sent. */
static ngx_int_t
ngx_http_gpuaas_upstream_uri(ngx_http_request_t *r,
    ngx_http_gpuaas_grant_t *grant, ngx_str_t *out)
{
    u_char     *p;
    ngx_str_t  *uri, *public, *upstream, rest;

    uri = &r->unparsed_uri;
    public = &grant->value[G_PUBLIC];
    upstream = &grant->value[G_UPSTREAM_PREFIX];
    ngx_str_null(out);

    if (!(public->len == 1 && public->data[0] == '/')) {
        if (uri->len < public->len
            || ngx_strncmp(uri->data, public->data, public->len) != 0)
        {
            return NGX_OK;
        }
        rest.data = uri->data + public->len;
        rest.len = uri->len - public->len;

    } else if (uri->len >= upstream->len
               && ngx_strncmp(uri->data, upstream->data, upstream->len) == 0)
    {
        return NGX_OK;

    } else if (uri->len && uri->data[0] == '/') {
        rest.data = uri->data + 1;
        rest.len = uri->len - 1;

    } else {
        return NGX_OK;
    }

    p = ngx_pnalloc(r->pool, upstream->len + rest.len);
    if (p == NULL) {
        return NGX_ERROR;
    }

    out->data = p;
    p = ngx_cpymem(p, upstream->data, upstream->len);
    p = ngx_cpymem(p, rest.data, rest.len);
    out->len = p - out->data;

    if (out->len == uri->len && ngx_strncmp(out->data, uri->data, uri->len) == 0)
    {
        ngx_str_null(out);
    }

    return NGX_OK;
}


static u_char *
ngx_http_gpuaas_skip_space(u_char *p, u_char *end)
{
    while (p < end && ngx_http_gpuaas_is_space(*p)) {
        p++;
    }
    return p;
}


static u_char *
ngx_http_gpuaas_digits(u_char *p, u_char *end, off_t *n)
{
    u_char  *start;

    start = p;
    while (p < end && *p >= '0' && *p <= '9') {
        p++;
    }

    *n = (p > start) ? ngx_atoof(start, p - start) : -1;
    return p;
}


/* The browser's Range on a route with a secret (apps.proxy.dataplane.ranges): one
 * range is asked of the app widened by the secret's length less one on each side,
 * and the filters below send the asked part of the masked bytes. Any other Range:
 * the app is asked for the whole body. */
static ngx_int_t
ngx_http_gpuaas_widen(ngx_http_request_t *r, ngx_http_gpuaas_ctx_t *ctx)
{
    u_char      *p, *end;
    off_t        first, last, margin;
    ngx_str_t   *value;

    value = &r->headers_in.range->value;
    p = value->data;
    end = p + value->len;

    p = ngx_http_gpuaas_skip_space(p, end);
    if (end - p < 5 || ngx_strncasecmp(p, (u_char *) "bytes", 5) != 0) {
        return NGX_OK;
    }
    p = ngx_http_gpuaas_skip_space(p + 5, end);
    if (p == end || *p++ != '=') {
        return NGX_OK;
    }
    p = ngx_http_gpuaas_digits(ngx_http_gpuaas_skip_space(p, end), end, &first);
    p = ngx_http_gpuaas_skip_space(p, end);
    if (p == end || *p++ != '-') {
        return NGX_OK;
    }
    p = ngx_http_gpuaas_digits(ngx_http_gpuaas_skip_space(p, end), end, &last);
    if (ngx_http_gpuaas_skip_space(p, end) != end) {
        return NGX_OK;
    }

    margin = ctx->grant->value[G_SECRET].len - 1;
    if (first > NGX_MAX_OFF_T_VALUE - margin || last > NGX_MAX_OFF_T_VALUE - margin)
    {
        return NGX_OK;
    }

    ctx->range.data = ngx_pnalloc(r->pool, sizeof("bytes=-") + 2 * NGX_OFF_T_LEN);
    if (ctx->range.data == NULL) {
        return NGX_ERROR;
    }

    if (first >= 0) {
        if (last >= 0 && last < first) {
            return NGX_OK;
        }
        ctx->first = first;
        ctx->last = last;
        ctx->suffix = -1;
        first = ngx_max(0, first - margin);
        ctx->range.len = (last >= 0)
            ? ngx_sprintf(ctx->range.data, "bytes=%O-%O", first, last + margin)
              - ctx->range.data
            : ngx_sprintf(ctx->range.data, "bytes=%O-", first) - ctx->range.data;

    } else if (last > 0) {
        ctx->first = -1;
        ctx->last = -1;
        ctx->suffix = last;
        ctx->range.len = ngx_sprintf(ctx->range.data, "bytes=-%O", last + margin)
                         - ctx->range.data;

    } else {
        return NGX_OK;
    }

    ctx->ranged = 1;
    return NGX_OK;
}


static ngx_int_t
ngx_http_gpuaas_apply(ngx_http_request_t *r, ngx_http_gpuaas_grant_t *grant)
{
    ngx_int_t               rc;
    ngx_http_gpuaas_ctx_t  *ctx;

    ctx = ngx_pcalloc(r->pool, sizeof(ngx_http_gpuaas_ctx_t));
    if (ctx == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    rc = ngx_http_gpuaas_count(r, grant);
    if (rc != NGX_OK) {
        return rc;
    }

    ctx->grant = grant;
    ctx->left = -1;
    ngx_http_set_ctx(r, ctx, ngx_http_gpuaas_module);

    if (ngx_http_gpuaas_upstream_uri(r, grant, &ctx->uri) != NGX_OK
        || ngx_http_gpuaas_app_cookies(r, &ctx->cookie) != NGX_OK)
    {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    if (grant->value[G_SECRET].len && r->headers_in.range
        && ngx_http_gpuaas_widen(r, ctx) != NGX_OK)
    {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    /* The browser's Authorization goes upstream only on bearer_passthrough routes;
     * elsewhere it is the route's bridge header, or nothing. */
    if (grant->passthrough) {
        if (r->headers_in.authorization) {
            ctx->auth = r->headers_in.authorization->value;
        }

    } else {
        ctx->auth = grant->value[G_AUTHORIZATION];
    }

    return NGX_OK;
}


/* --- The route's gate (rewrite phase) ----------------------------------------- */

static ngx_int_t
ngx_http_gpuaas_handler(ngx_http_request_t *r)
{
    u_char                      *key;
    size_t                       len;
    ngx_int_t                    rc;
    ngx_http_gpuaas_grant_t     *grant;
    ngx_http_gpuaas_loc_conf_t  *glcf;

    glcf = ngx_http_get_module_loc_conf(r, ngx_http_gpuaas_module);
    if (glcf->ask.len == 0 || r != r->main
        || ngx_http_get_module_ctx(r, ngx_http_gpuaas_module))
    {
        return NGX_DECLINED;
    }

    /* A WebSocket handshake is always asked afresh (its Origin is checked). */
    if (r->headers_in.upgrade == NULL) {
        if (ngx_http_gpuaas_key(r, &key, &len) != NGX_OK) {
            return NGX_HTTP_INTERNAL_SERVER_ERROR;
        }

        grant = ngx_http_gpuaas_find(ngx_http_gpuaas_hash(key, len), key, len,
                                     NULL);
        if (grant && grant->fresh_until > ngx_http_gpuaas_now()) {
            rc = ngx_http_gpuaas_apply(r, grant);
            return (rc == NGX_OK) ? NGX_DECLINED : rc;
        }
    }

    (void) ngx_http_named_location(r, &glcf->ask);
    ngx_http_finalize_request(r, NGX_DONE);
    return NGX_DONE;
}


/* gpuaas.lua, with a grant it got from shared memory or the portal: applies it
 * to the request (0, or the HTTP status to end it with), and keeps it in this
 * worker while fresh when `remember` is set. */
int
ngx_http_gpuaas_grant(ngx_http_request_t *r, u_char *stored, size_t len,
    int remember)
{
    u_char                       *key;
    size_t                        key_len;
    ngx_int_t                     rc;
    ngx_http_gpuaas_grant_t      *grant;
    ngx_http_gpuaas_main_conf_t  *gmcf;

    if (ngx_http_gpuaas_key(r, &key, &key_len) != NGX_OK) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    grant = ngx_http_gpuaas_parse(key, key_len, stored, len);
    if (grant == NULL) {
        ngx_log_error(NGX_LOG_ERR, r->connection->log, 0,
                      "the portal's grant does not parse: nothing is proxied");
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    grant->refs = 1;  /* ours, until the end of this function */
    gmcf = ngx_http_get_module_main_conf(r, ngx_http_gpuaas_module);
    if (remember && grant->fresh_until > ngx_http_gpuaas_now()) {
        ngx_http_gpuaas_remember(grant, gmcf->grants_max);
    }

    rc = ngx_http_gpuaas_apply(r, grant);
    ngx_http_gpuaas_unref(grant);

    return (int) rc;
}


/* --- Variables ---------------------------------------------------------------- */

enum {
    V_URI = G_VALUES, V_COOKIE, V_AUTH, V_MASKED, V_RANGE, V_RANGED, V_ROUTE
};


static ngx_int_t
ngx_http_gpuaas_variable(ngx_http_request_t *r, ngx_http_variable_value_t *v,
    uintptr_t data)
{
    ngx_str_t              *value, route;
    ngx_http_gpuaas_ctx_t  *ctx;

    v->valid = 1;
    v->no_cacheable = 0;
    v->not_found = 0;
    value = NULL;

    if (data == V_ROUTE) {
        (void) ngx_http_gpuaas_route(r, &route);
        value = &route;

    } else {
        ctx = ngx_http_get_module_ctx(r, ngx_http_gpuaas_module);
        if (ctx == NULL) {
            v->not_found = 1;
            return NGX_OK;
        }

        switch (data) {
        case V_URI:
            value = &ctx->uri;
            break;
        case V_COOKIE:
            value = &ctx->cookie;
            break;
        case V_AUTH:
            value = &ctx->auth;
            break;
        case V_MASKED:
            value = ctx->grant->value[G_SECRET].len ? &ngx_http_gpuaas_one : NULL;
            break;
        case V_RANGE:
            value = ctx->ranged ? &ctx->range : NULL;
            break;
        case V_RANGED:
            value = ctx->ranged ? &ngx_http_gpuaas_one : NULL;
            break;
        default:
            value = &ctx->grant->value[data];
        }
    }

    if (value == NULL) {
        v->len = 0;
        v->data = (u_char *) "";
        return NGX_OK;
    }

    v->len = value->len;
    v->data = value->data;
    return NGX_OK;
}


static ngx_int_t
ngx_http_gpuaas_add_variables(ngx_conf_t *cf)
{
    static struct {
        ngx_str_t   name;
        uintptr_t   data;
    } variables[] = {
        { ngx_string("g_upstream"), G_UPSTREAM },
        { ngx_string("g_public"), G_PUBLIC },
        { ngx_string("g_from"), G_FROM },
        { ngx_string("g_forwarded"), G_FORWARDED },
        { ngx_string("g_frame"), G_FRAME },
        { ngx_string("g_uri"), V_URI },
        { ngx_string("g_cookie"), V_COOKIE },
        { ngx_string("g_auth"), V_AUTH },
        { ngx_string("g_masked"), V_MASKED },
        { ngx_string("g_range"), V_RANGE },
        { ngx_string("g_ranged"), V_RANGED },
        { ngx_string("g_route"), V_ROUTE },
    };

    ngx_uint_t           i;
    ngx_http_variable_t  *var;

    for (i = 0; i < sizeof(variables) / sizeof(variables[0]); i++) {
        /* Cached: nothing reads them before the grant is applied, and once it
         * is they hold for the request. */
        var = ngx_http_add_variable(cf, &variables[i].name, 0);
        if (var == NULL) {
            return NGX_ERROR;
        }
        var->get_handler = ngx_http_gpuaas_variable;
        var->data = variables[i].data;
    }

    return NGX_OK;
}


/* --- Masking the secret, and cutting a widened range -------------------------- */

static ngx_int_t
ngx_http_gpuaas_content_range(ngx_http_request_t *r, ngx_table_elt_t **found)
{
    ngx_uint_t        i;
    ngx_list_part_t  *part;
    ngx_table_elt_t  *h;

    if (r->headers_out.content_range) {
        *found = r->headers_out.content_range;
        return NGX_OK;
    }

    part = &r->headers_out.headers.part;
    h = part->elts;
    for (i = 0; /* void */; i++) {
        if (i >= part->nelts) {
            if (part->next == NULL) {
                break;
            }
            part = part->next;
            h = part->elts;
            i = 0;
        }
        if (h[i].hash && h[i].key.len == sizeof("Content-Range") - 1
            && ngx_strncasecmp(h[i].key.data, (u_char *) "Content-Range",
                               sizeof("Content-Range") - 1) == 0)
        {
            *found = &h[i];
            return NGX_OK;
        }
    }

    *found = NULL;
    return NGX_DECLINED;
}


static void
ngx_http_gpuaas_set_length(ngx_http_request_t *r, off_t length)
{
    if (r->headers_out.content_length) {
        r->headers_out.content_length->hash = 0;
        r->headers_out.content_length = NULL;
    }
    r->headers_out.content_length_n = length;
}


/* The asked part of the app's widened one; past the body's end a 416; a part that
 * is not the one asked for, an empty 502. */
static ngx_int_t
ngx_http_gpuaas_cut(ngx_http_request_t *r, ngx_http_gpuaas_ctx_t *ctx)
{
    u_char           *p, *end;
    off_t             sent_first, sent_last, total, first, last;
    ngx_table_elt_t  *range;

    if (r->headers_out.status != NGX_HTTP_PARTIAL_CONTENT) {
        return NGX_OK;  /* the whole body: the app ignored the Range */
    }

    ctx->cutting = 1;
    ctx->skip = 0;
    ctx->keep = 0;   /* nothing of the app's body, unless: */
    sent_first = sent_last = total = -1;
    first = last = -1;

    (void) ngx_http_gpuaas_content_range(r, &range);
    if (range) {
        p = ngx_http_gpuaas_skip_space(range->value.data,
                                       range->value.data + range->value.len);
        end = range->value.data + range->value.len;
        if (end - p > 5 && ngx_strncasecmp(p, (u_char *) "bytes", 5) == 0
            && ngx_http_gpuaas_is_space(p[5]))
        {
            p = ngx_http_gpuaas_skip_space(p + 5, end);
            p = ngx_http_gpuaas_digits(p, end, &sent_first);
            if (p < end && *p == '-') {
                p = ngx_http_gpuaas_digits(p + 1, end, &sent_last);
                if (p < end && *p == '/' && sent_first >= 0 && sent_last >= 0) {
                    p++;
                    if (p < end && *p == '*') {
                        total = -2;  /* unknown */
                        p++;
                    } else {
                        p = ngx_http_gpuaas_digits(p, end, &total);
                    }
                    if (total == -1 || ngx_http_gpuaas_skip_space(p, end) != end) {
                        sent_last = -1;
                    }
                }
            }
        }
    }

    if (sent_last >= 0 && sent_first >= 0 && total != -1) {
        if (ctx->suffix >= 0) {
            first = ngx_max(sent_first, sent_last - ctx->suffix + 1);
            last = sent_last;
        } else {
            first = ctx->first;
            last = ctx->last >= 0 ? ngx_min(ctx->last, sent_last) : sent_last;
        }
    }

    r->headers_out.status_line.len = 0;

    if (first >= 0 && first > sent_last && total >= 0 && first >= total) {
        r->headers_out.status = NGX_HTTP_RANGE_NOT_SATISFIABLE;
        range->value.data = ngx_pnalloc(r->pool, sizeof("bytes */") + NGX_OFF_T_LEN);
        if (range->value.data == NULL) {
            return NGX_ERROR;
        }
        range->value.len = ngx_sprintf(range->value.data, "bytes */%O", total)
                           - range->value.data;
        ngx_http_gpuaas_set_length(r, 0);

    } else if (first < 0 || first < sent_first || first > last) {
        ngx_log_error(NGX_LOG_ERR, r->connection->log, 0,
                      "the app answered a widened Range with Content-Range "
                      "\"%V\": nothing is sent",
                      range ? &range->value : &ctx->range);
        r->headers_out.status = NGX_HTTP_BAD_GATEWAY;
        if (range) {
            range->hash = 0;
            r->headers_out.content_range = NULL;
        }
        ngx_http_gpuaas_set_length(r, 0);

    } else {
        range->value.data = ngx_pnalloc(r->pool,
                                        sizeof("bytes -/") + 3 * NGX_OFF_T_LEN);
        if (range->value.data == NULL) {
            return NGX_ERROR;
        }
        range->value.len = (total >= 0
            ? ngx_sprintf(range->value.data, "bytes %O-%O/%O", first, last, total)
            : ngx_sprintf(range->value.data, "bytes %O-%O/*", first, last))
            - range->value.data;
        ngx_http_gpuaas_set_length(r, last - first + 1);
        ctx->skip = first - sent_first;
        ctx->keep = last - first + 1;
    }

    return NGX_OK;
}


static ngx_int_t
ngx_http_gpuaas_header_filter(ngx_http_request_t *r)
{
    ngx_http_gpuaas_ctx_t  *ctx;

    ctx = ngx_http_get_module_ctx(r, ngx_http_gpuaas_module);
    if (ctx && ctx->grant->value[G_SECRET].len) {
        ctx->left = r->headers_out.content_length_n;  /* the app's */
        if (ctx->ranged && ngx_http_gpuaas_cut(r, ctx) != NGX_OK) {
            return NGX_ERROR;
        }
    }

    return ngx_http_next_header_filter(r);
}


/* How many bytes at the end of data could begin the secret. */
static size_t
ngx_http_gpuaas_could_begin(u_char *data, size_t len, ngx_str_t *secret)
{
    size_t  at, n;

    at = (len >= secret->len) ? len - secret->len + 1 : 0;
    for (/* void */; at < len; at++) {
        n = len - at;
        if (data[at] == secret->data[0] && ngx_memcmp(data + at, secret->data, n) == 0)
        {
            return n;
        }
    }

    return 0;
}


/* Masks the route's secret (the bridged token, which JupyterLab writes into its
 * page config) in every response, as the portal's proxy does
 * (apps.proxy.dataplane.redact, decision 0023): as many "x", so the body keeps its
 * length and the app's Content-Length holds. A secret can straddle two of the
 * app's writes: a chunk's end that could begin one waits for the next chunk;
 * nothing else is held back, so event streams flow. A chunk with nothing to change
 * goes on as it came. */
static ngx_int_t
ngx_http_gpuaas_body_filter(ngx_http_request_t *r, ngx_chain_t *in)
{
    off_t                   size;
    size_t                  len, keep, n;
    u_char                 *data, *p, *end, *found;
    ngx_buf_t              *b, *last;
    ngx_str_t              *secret;
    ngx_uint_t              ends;
    ngx_chain_t            *cl, *out;
    ngx_http_gpuaas_ctx_t  *ctx;

    ctx = ngx_http_get_module_ctx(r, ngx_http_gpuaas_module);
    if (ctx == NULL || in == NULL || ctx->grant->value[G_SECRET].len == 0) {
        return ngx_http_next_body_filter(r, in);
    }

    secret = &ctx->grant->value[G_SECRET];

    size = 0;
    last = NULL;
    for (cl = in; cl; cl = cl->next) {
        b = cl->buf;
        if (!ngx_buf_in_memory(b)) {
            if (ngx_buf_size(b)) {
                ngx_log_error(NGX_LOG_ALERT, r->connection->log, 0,
                              "a response on a route with a secret is not in "
                              "memory: not sent (proxy_buffering must be off)");
                return NGX_ERROR;
            }
        } else {
            size += b->last - b->pos;
        }
        last = b;
    }

    if (ctx->left >= 0) {
        ctx->left -= size;
    }
    ends = last->last_buf || last->last_in_chain || ctx->left == 0;

    /* One buffer with nothing to mask, hold or cut: as it came. */
    b = in->buf;
    if (in->next == NULL && ctx->nheld == 0 && !ctx->cutting
        && (size == 0
            || (memmem(b->pos, size, secret->data, secret->len) == NULL
                && (ends || ngx_http_gpuaas_could_begin(b->pos, size, secret)
                            == 0))))
    {
        return ngx_http_next_body_filter(r, in);
    }

    len = ctx->nheld + (size_t) size;
    data = ngx_pnalloc(r->pool, len ? len : 1);
    if (data == NULL) {
        return NGX_ERROR;
    }

    p = ngx_cpymem(data, ctx->held, ctx->nheld);
    for (cl = in; cl; cl = cl->next) {
        b = cl->buf;
        if (ngx_buf_in_memory(b)) {
            p = ngx_cpymem(p, b->pos, b->last - b->pos);
            b->pos = b->last;
        }
    }

    p = data;
    end = data + len;
    while ((size_t) (end - p) >= secret->len) {
        found = memmem(p, end - p, secret->data, secret->len);
        if (found == NULL) {
            break;
        }
        ngx_memset(found, 'x', secret->len);
        p = found + secret->len;
    }

    keep = ends ? 0 : ngx_http_gpuaas_could_begin(data, len, secret);
    if (keep) {
        if (ctx->held == NULL) {
            ctx->held = ngx_pnalloc(r->pool, secret->len);
            if (ctx->held == NULL) {
                return NGX_ERROR;
            }
        }
        ngx_memcpy(ctx->held, data + len - keep, keep);
        len -= keep;
    }
    ctx->nheld = keep;

    if (ctx->cutting) {  /* a widened range: the asked part only */
        n = (size_t) ngx_min((off_t) len, ctx->skip);
        data += n;
        len -= n;
        ctx->skip -= n;
        len = (size_t) ngx_min((off_t) len, ctx->keep);
        ctx->keep -= len;
    }

    b = ngx_calloc_buf(r->pool);
    out = ngx_alloc_chain_link(r->pool);
    if (b == NULL || out == NULL) {
        return NGX_ERROR;
    }

    b->pos = data;
    b->last = data + len;
    b->temporary = len ? 1 : 0;
    b->last_buf = last->last_buf;
    b->last_in_chain = last->last_in_chain;
    b->flush = last->flush;
    b->sync = (len == 0 && !b->last_buf && !b->flush) ? 1 : 0;
    b->tag = (ngx_buf_tag_t) &ngx_http_gpuaas_module;
    out->buf = b;
    out->next = NULL;

    return ngx_http_next_body_filter(r, out);
}


/* --- The balancer ------------------------------------------------------------- */

static ngx_int_t
ngx_http_gpuaas_get_peer(ngx_peer_connection_t *pc, void *data)
{
    ngx_http_gpuaas_ctx_t   *ctx = data;
    ngx_http_gpuaas_peer_t  *peer;

    peer = &ctx->grant->peer[ctx->tries++ % ctx->grant->npeers];
    pc->sockaddr = peer->sockaddr;
    pc->socklen = peer->socklen;
    pc->name = &peer->name;
    pc->cached = 0;
    pc->connection = NULL;

    return NGX_OK;
}


static void
ngx_http_gpuaas_free_peer(ngx_peer_connection_t *pc, void *data,
    ngx_uint_t state)
{
    if (pc->tries) {
        pc->tries--;
    }
}


/* The grant's address, so nginx keeps connections to the apps alive (the keepalive
 * pool matches connections by address); a name with several addresses gets them
 * in turn, as nginx's resolver would. */
static ngx_int_t
ngx_http_gpuaas_init_peer(ngx_http_request_t *r,
    ngx_http_upstream_srv_conf_t *us)
{
    ngx_http_gpuaas_ctx_t  *ctx;

    ctx = ngx_http_get_module_ctx(r, ngx_http_gpuaas_module);
    if (ctx == NULL) {
        ngx_log_error(NGX_LOG_ERR, r->connection->log, 0,
                      "gpuaas_balancer: the request has no grant");
        return NGX_ERROR;
    }

    r->upstream->peer.get = ngx_http_gpuaas_get_peer;
    r->upstream->peer.free = ngx_http_gpuaas_free_peer;
    r->upstream->peer.data = ctx;
    r->upstream->peer.tries = ctx->grant->npeers;

    return NGX_OK;
}


static ngx_int_t
ngx_http_gpuaas_init_upstream(ngx_conf_t *cf, ngx_http_upstream_srv_conf_t *us)
{
    us->peer.init = ngx_http_gpuaas_init_peer;
    return NGX_OK;
}


static char *
ngx_http_gpuaas_balancer(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    ngx_http_upstream_srv_conf_t  *uscf;

    uscf = ngx_http_conf_get_module_srv_conf(cf, ngx_http_upstream_module);
    if (uscf->peer.init_upstream) {
        return "is set after another balancer (keepalive comes after it)";
    }

    uscf->peer.init_upstream = ngx_http_gpuaas_init_upstream;
    return NGX_CONF_OK;
}


/* --- Configuration ------------------------------------------------------------ */

static ngx_int_t
ngx_http_gpuaas_init_zone(ngx_shm_zone_t *shm_zone, void *data)
{
    ngx_http_gpuaas_main_conf_t  *old = data;
    ngx_http_gpuaas_main_conf_t  *gmcf = shm_zone->data;

    if (old) {  /* a reload keeps the counts of requests still open */
        gmcf->sh = old->sh;
        gmcf->shpool = old->shpool;
        return NGX_OK;
    }

    gmcf->shpool = (ngx_slab_pool_t *) shm_zone->shm.addr;
    if (shm_zone->shm.exists) {
        gmcf->sh = gmcf->shpool->data;
        return NGX_OK;
    }

    gmcf->sh = ngx_slab_alloc(gmcf->shpool, sizeof(ngx_http_gpuaas_shctx_t));
    if (gmcf->sh == NULL) {
        return NGX_ERROR;
    }
    gmcf->shpool->data = gmcf->sh;
    ngx_rbtree_init(&gmcf->sh->rbtree, &gmcf->sh->sentinel,
                    ngx_str_rbtree_insert_value);

    return NGX_OK;
}


static char *
ngx_http_gpuaas_zone(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    ngx_http_gpuaas_main_conf_t  *gmcf = conf;

    ssize_t     size;
    ngx_str_t  *value, name = ngx_string("gpuaas_connections");

    if (gmcf->zone) {
        return "is duplicate";
    }

    value = cf->args->elts;
    size = ngx_parse_size(&value[1]);
    if (size == NGX_ERROR || size < (ssize_t) (8 * ngx_pagesize)) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0, "invalid zone size \"%V\"",
                           &value[1]);
        return NGX_CONF_ERROR;
    }

    gmcf->zone = ngx_shared_memory_add(cf, &name, size, &ngx_http_gpuaas_module);
    if (gmcf->zone == NULL) {
        return NGX_CONF_ERROR;
    }
    gmcf->zone->init = ngx_http_gpuaas_init_zone;
    gmcf->zone->data = gmcf;

    return NGX_CONF_OK;
}


static void *
ngx_http_gpuaas_create_main_conf(ngx_conf_t *cf)
{
    ngx_http_gpuaas_main_conf_t  *gmcf;

    gmcf = ngx_pcalloc(cf->pool, sizeof(ngx_http_gpuaas_main_conf_t));
    if (gmcf == NULL) {
        return NULL;
    }

    gmcf->grants_max = NGX_CONF_UNSET_UINT;
    return gmcf;
}


static char *
ngx_http_gpuaas_init_main_conf(ngx_conf_t *cf, void *conf)
{
    ngx_http_gpuaas_main_conf_t  *gmcf = conf;

    /* a worker's grants: a few KB each */
    ngx_conf_init_uint_value(gmcf->grants_max, 4096);
    if (gmcf->grants_max == 0) {
        return "gpuaas_grants_per_worker must be 1 or more";
    }

    return NGX_CONF_OK;
}


static void *
ngx_http_gpuaas_create_loc_conf(ngx_conf_t *cf)
{
    return ngx_pcalloc(cf->pool, sizeof(ngx_http_gpuaas_loc_conf_t));
}


static char *
ngx_http_gpuaas_merge_loc_conf(ngx_conf_t *cf, void *parent, void *child)
{
    /* not inherited: only the location that names it is an app route's gate */
    return NGX_CONF_OK;
}


static ngx_int_t
ngx_http_gpuaas_init(ngx_conf_t *cf)
{
    ngx_http_handler_pt        *h;
    ngx_http_core_main_conf_t  *cmcf;

    cmcf = ngx_http_conf_get_module_main_conf(cf, ngx_http_core_module);
    h = ngx_array_push(&cmcf->phases[NGX_HTTP_REWRITE_PHASE].handlers);
    if (h == NULL) {
        return NGX_ERROR;
    }
    *h = ngx_http_gpuaas_handler;

    ngx_http_next_header_filter = ngx_http_top_header_filter;
    ngx_http_top_header_filter = ngx_http_gpuaas_header_filter;
    ngx_http_next_body_filter = ngx_http_top_body_filter;
    ngx_http_top_body_filter = ngx_http_gpuaas_body_filter;

    return NGX_OK;
}
