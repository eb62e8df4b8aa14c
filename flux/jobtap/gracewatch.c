/* gracewatch.c - a flux-core job-manager (jobtap) plugin: the scheduler
 * plans every job with a time limit T for T + G, and the job still ends
 * at its own time limit.
 *
 * G is gracewatch's grace period: a node whose teardown runs past
 * D = min(T_end, E) + G is drained by gracewatch with a diagnosis. With
 * the plan carrying E + G, the scheduler (Fluxion) keeps the node out of
 * every future plan until E + G, when it is either free again or drained:
 * a pending job is never planned on a node gracewatch may still drain.
 *
 * How (docs/DESIGN.md, "Flux: the plan carries G"):
 *
 *  - Before the job is scheduled (job.validate of a new job, job.new of
 *    a pending job at a restart or at the plugin's load, job.state.priority
 *    after every jobspec update) its jobspec's attributes.system.duration
 *    becomes T + G, and attributes.system.gracewatch records
 *    {"duration": T, "grace": G}, the user's own limit and the G added.
 *    The invariant duration == gracewatch.duration + gracewatch.grace
 *    tells an augmented jobspec from one changed since (flux update).
 *
 *  - When the job starts (its start event, or job.new of a running job
 *    at the plugin's load), a resource-update event sets R's
 *    execution.expiration to E = min(starttime + T, expiration). The
 *    job-manager sends it to the exec system, which ends the job at E
 *    exactly as without the plugin (its own "timeout" exception,
 *    "resource allocation expired", SIGALRM, then its kill-timeout).
 *    The scheduler is not told: its allocation keeps E + G. flux jobs,
 *    flux job info R and flux job timeleft show E.
 *
 *  - `flux update JOBID duration=T2` of a pending job: T2 is checked by
 *    the job-manager's limits as the user's request (the update carries
 *    gracewatch {"duration": T2, "grace": 0}); the job then re-enters
 *    PRIORITY, where G is added again.
 *
 * Jobs without a time limit (duration 0) are not changed. A duration whose
 * T + G exceeds MAX_DURATION is left as it is (the plan without G).
 *
 * Configuration: the instance's [gracewatch] table, read at load and at
 * every `flux config reload`; a bad table refuses the load (or the
 * reload) with a message that names the key:
 *
 *   [gracewatch]
 *   grace = "90s"              # G: FSD (s, m, h, d) or seconds; 0 .. 7d
 *   queues = { debug = "30s" } # G of a named queue (attributes.system.queue)
 */

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>
#include <flux/core.h>
#include <flux/jobtap.h>

/* The longest G, as the node agent's (agent/request: MaxGrace). */
#define MAX_GRACE (7. * 86400.)
/* The longest T + G the plugin writes (about 31 years): a longer limit is
 * left alone. */
#define MAX_DURATION 1e9
/* How close two durations (seconds, as JSON reals) must be to be equal. */
#define EPSILON 1e-3

struct gw {
    double grace;     /* G of jobs in no configured queue */
    json_t *queues;   /* queue name -> G (a JSON real) */
};

static const char *auxkey = "gracewatch";

/* f58 is the job's id as flux submit prints it, for log lines. */
static const char *f58 (flux_jobid_t id, char *buf, size_t len)
{
    if (flux_job_id_encode (id, "f58", buf, len) < 0)
        snprintf (buf, len, "%ju", (uintmax_t) id);
    return buf;
}

/* Updates of pending jobs that job.new asks for are sent by job id once
 * the job-manager's callbacks have returned. At the plugin's load flux-core
 * calls job.new in a loop of its own, with the job as the current one:
 * there flux_jobtap_jobspec_update_pack() stores the update but nothing
 * posts it (flux-core posts a stored update after the next plugin callback
 * of whichever job comes next, so it would change another job), and
 * flux_jobtap_jobspec_update_id_pack() refuses the current job. */
struct deferred {
    flux_watcher_t *w;
    json_t *jobs; /* [[id, T + G, T, G], ...] */
};

static const char *deferkey = "gracewatch::deferred";

static void deferred_destroy (void *arg)
{
    struct deferred *d = arg;
    if (d) {
        int saved_errno = errno;
        flux_watcher_destroy (d->w);
        json_decref (d->jobs);
        free (d);
        errno = saved_errno;
    }
}

static void deferred_cb (flux_reactor_t *r, flux_watcher_t *w,
                         int revents, void *arg)
{
    flux_plugin_t *p = arg;
    struct deferred *d = flux_plugin_aux_get (p, deferkey);
    flux_t *h = flux_jobtap_get_flux (p);
    json_t *jobs;
    json_t *job;
    size_t i;
    char ids[32];

    if (!d)
        return;
    jobs = d->jobs; /* an update may call job.new again: a fresh list */
    if (!(d->jobs = json_array ())) {
        d->jobs = jobs;
        return;
    }
    json_array_foreach (jobs, i, job) {
        json_int_t id = 0;
        double want = 0., user = 0., grace = 0.;
        if (json_unpack (job, "[I F F F]", &id, &want, &user, &grace) < 0)
            continue;
        if (flux_jobtap_jobspec_update_id_pack (p, (flux_jobid_t) id,
                                         "{s:f s:{s:f s:f}}",
                                         "attributes.system.duration", want,
                                         "attributes.system.gracewatch",
                                           "duration", user,
                                           "grace", grace) < 0)
            flux_log_error (h, "gracewatch: job %s: cannot add the grace to"
                            " its duration",
                            f58 ((flux_jobid_t) id, ids, sizeof (ids)));
    }
    json_decref (jobs);
}

/* defer queues the update of job id for deferred_cb; -1 if it cannot. */
static int defer (flux_plugin_t *p, flux_jobid_t id, double want,
                  double user, double grace)
{
    struct deferred *d = flux_plugin_aux_get (p, deferkey);
    json_t *o;

    if (!d) {
        flux_reactor_t *r = flux_get_reactor (flux_jobtap_get_flux (p));
        if (!(d = calloc (1, sizeof (*d))))
            return -1;
        if (!r
            || !(d->jobs = json_array ())
            || !(d->w = flux_timer_watcher_create (r, 0., 0., deferred_cb, p))
            || flux_plugin_aux_set (p, deferkey, d, deferred_destroy) < 0) {
            deferred_destroy (d);
            return -1;
        }
    }
    if (!(o = json_pack ("[I f f f]", (json_int_t) id, want, user, grace))
        || json_array_append_new (d->jobs, o) < 0)
        return -1;
    flux_timer_watcher_reset (d->w, 0., 0.);
    flux_watcher_start (d->w);
    return 0;
}

static void gw_destroy (struct gw *gw)
{
    if (gw) {
        int saved_errno = errno;
        json_decref (gw->queues);
        free (gw);
        errno = saved_errno;
    }
}

/* parse_fsd reads a Flux Standard Duration (RFC 23: a non-negative
 * number with an optional unit s, m, h or d) or a JSON number of
 * seconds into *out; -1 with a message in err on anything else. */
static int parse_fsd (json_t *v, double *out, char *err, size_t errlen,
                      const char *key)
{
    double d, mult = 1.;
    char *end;
    const char *s;

    if (json_is_number (v)) {
        d = json_number_value (v);
    }
    else if (json_is_string (v)) {
        s = json_string_value (v);
        errno = 0;
        d = strtod (s, &end);
        if (end == s || errno != 0) {
            snprintf (err, errlen, "gracewatch: %s: \"%s\" is not a duration"
                      " (want e.g. \"90s\", \"2m\" or seconds)", key, s);
            return -1;
        }
        if (*end != '\0') {
            if (end[1] != '\0')
                goto badunit;
            switch (*end) {
                case 's': mult = 1.; break;
                case 'm': mult = 60.; break;
                case 'h': mult = 3600.; break;
                case 'd': mult = 86400.; break;
                default: goto badunit;
            }
        }
        d *= mult;
    }
    else {
        snprintf (err, errlen, "gracewatch: %s: want a duration string"
                  " such as \"90s\" or a number of seconds", key);
        return -1;
    }
    if (!isfinite (d) || d < 0.) {
        snprintf (err, errlen, "gracewatch: %s: %g is negative or not finite",
                  key, d);
        return -1;
    }
    if (d > MAX_GRACE) {
        snprintf (err, errlen, "gracewatch: %s: %gs is longer than 7 days",
                  key, d);
        return -1;
    }
    *out = d;
    return 0;
badunit:
    snprintf (err, errlen, "gracewatch: %s: \"%s\": unknown unit"
              " (want s, m, h or d)", key, json_string_value (v));
    return -1;
}

/* conf_parse reads the [gracewatch] table of the instance's config. */
static struct gw *conf_parse (json_t *conf, char *err, size_t errlen)
{
    struct gw *gw;
    json_t *table, *v;
    const char *key;
    char name[128];

    if (!(gw = calloc (1, sizeof (*gw))) || !(gw->queues = json_object ())) {
        snprintf (err, errlen, "gracewatch: out of memory");
        gw_destroy (gw);
        return NULL;
    }
    if (!conf || !(table = json_object_get (conf, "gracewatch"))) {
        snprintf (err, errlen, "gracewatch: the instance's config has no"
                  " [gracewatch] table with grace = G");
        goto error;
    }
    if (!json_is_object (table)) {
        snprintf (err, errlen, "gracewatch: [gracewatch] must be a table");
        goto error;
    }
    if (!(v = json_object_get (table, "grace"))) {
        snprintf (err, errlen, "gracewatch: [gracewatch] grace is missing"
                  " (G, e.g. grace = \"90s\")");
        goto error;
    }
    json_object_foreach (table, key, v) {
        if (!strcmp (key, "grace")) {
            if (parse_fsd (v, &gw->grace, err, errlen, "grace") < 0)
                goto error;
        }
        else if (!strcmp (key, "queues")) {
            const char *q;
            json_t *qv;
            if (!json_is_object (v)) {
                snprintf (err, errlen, "gracewatch: queues must be a table"
                          " of queue name = G");
                goto error;
            }
            json_object_foreach (v, q, qv) {
                double g;
                snprintf (name, sizeof (name), "queues.%.100s", q);
                if (parse_fsd (qv, &g, err, errlen, name) < 0
                    || json_object_set_new (gw->queues, q, json_real (g)) < 0)
                    goto error;
            }
        }
        else {
            snprintf (err, errlen, "gracewatch: unknown key \"%.100s\" in"
                      " [gracewatch] (known: grace, queues)", key);
            goto error;
        }
    }
    return gw;
error:
    gw_destroy (gw);
    return NULL;
}

static int conf_update_cb (flux_plugin_t *p,
                           const char *topic,
                           flux_plugin_arg_t *args,
                           void *arg)
{
    json_t *conf = NULL;
    struct gw *gw;
    char err[256] = "";

    if (flux_plugin_arg_unpack (args, FLUX_PLUGIN_ARG_IN, "{s:o}",
                                "conf", &conf) < 0)
        return flux_jobtap_error (p, args, "gracewatch: no config: %s",
                                  flux_plugin_arg_strerror (args));
    if (!(gw = conf_parse (conf, err, sizeof (err))))
        return flux_jobtap_error (p, args, "%s", err);
    if (flux_plugin_aux_set (p, auxkey, gw, (flux_free_f) gw_destroy) < 0) {
        gw_destroy (gw);
        return flux_jobtap_error (p, args, "gracewatch: out of memory");
    }
    flux_log (flux_jobtap_get_flux (p), LOG_INFO,
              "gracewatch: grace %gs, %zu queue(s) with their own",
              gw->grace, json_object_size (gw->queues));
    return 0;
}

/* grace_of is G for a job of queue (NULL: the default queue). */
static double grace_of (struct gw *gw, const char *queue)
{
    json_t *v;
    if (queue && (v = json_object_get (gw->queues, queue)))
        return json_number_value (v);
    return gw->grace;
}

/* user_duration is the user's own time limit of a jobspec: the recorded
 * attributes.system.gracewatch.duration if the jobspec's duration is
 * still that plus the recorded grace, else the jobspec's duration (a
 * job submitted without the plugin, or a duration changed since). */
static double user_duration (double duration, json_t *rec)
{
    double d = -1., g = -1.;
    if (rec && json_unpack (rec, "{s:F s:F}", "duration", &d, "grace", &g) == 0
        && d >= 0. && g >= 0. && fabs (duration - (d + g)) < EPSILON)
        return d;
    return duration;
}

/* augment makes the current job's jobspec carry T + G and its record (see
 * the top of the file), unless it does already. A record in a submitted
 * jobspec is the user's, not the plugin's: at submission (fresh) the
 * duration is T whatever it says. */
static void augment (flux_plugin_t *p, flux_plugin_arg_t *args, int fresh,
                     int deferred)
{
    struct gw *gw = flux_plugin_aux_get (p, auxkey);
    flux_t *h = flux_jobtap_get_flux (p);
    flux_jobid_t id = 0;
    double duration = 0., user, grace, want, d = -1., g = -1.;
    char ids[32];
    const char *queue = NULL;
    json_t *rec = NULL;

    if (!gw
        || flux_plugin_arg_unpack (args, FLUX_PLUGIN_ARG_IN,
                                   "{s:I s:{s:{s?{s?F s?s s?o}}}}",
                                   "id", &id,
                                   "jobspec",
                                     "attributes",
                                       "system",
                                         "duration", &duration,
                                         "queue", &queue,
                                         "gracewatch", &rec) < 0)
        return;
    user = fresh ? duration : user_duration (duration, rec);
    if (!isfinite (user) || user <= 0.)
        return; /* no time limit: not changed */
    grace = grace_of (gw, queue);
    want = user + grace;
    if (want > MAX_DURATION) {
        flux_log (h, LOG_WARNING,
                  "gracewatch: job %s: duration %gs + grace %gs is over %gs:"
                  " planned without the grace", f58 (id, ids, sizeof (ids)), user, grace,
                  MAX_DURATION);
        return;
    }
    if (rec)
        (void) json_unpack (rec, "{s:F s:F}", "duration", &d, "grace", &g);
    if (fabs (duration - want) < EPSILON && fabs (d - user) < EPSILON
        && fabs (g - grace) < EPSILON)
        return; /* done already */
    /* job.new: by id once the callbacks have returned (struct deferred);
     * else the update of the current job, posted when the callback
     * returns. */
    if (deferred ? defer (p, id, want, user, grace) < 0
                 : flux_jobtap_jobspec_update_pack (p, "{s:f s:{s:f s:f}}",
                                         "attributes.system.duration", want,
                                         "attributes.system.gracewatch",
                                           "duration", user,
                                           "grace", grace) < 0)
        flux_log_error (h, "gracewatch: job %s: cannot add the grace to its"
                        " duration", f58 (id, ids, sizeof (ids)));
}

/* end_at_user_limit posts the resource-update that makes the exec system
 * end a running job at its user's E (see the top of the file). */
static void end_at_user_limit (flux_plugin_t *p, flux_plugin_arg_t *args)
{
    flux_t *h = flux_jobtap_get_flux (p);
    flux_jobid_t id = 0;
    double duration = 0., start = 0., expiration = 0., user, e;
    char ids[32];
    json_t *rec = NULL;

    if (flux_plugin_arg_unpack (args, FLUX_PLUGIN_ARG_IN,
                                "{s:I s:{s:{s:{s?F s?o}}}"
                                " s:{s:{s?F s?F}}}",
                                "id", &id,
                                "jobspec",
                                  "attributes",
                                    "system",
                                      "duration", &duration,
                                      "gracewatch", &rec,
                                "R",
                                  "execution",
                                    "starttime", &start,
                                    "expiration", &expiration) < 0)
        return; /* no R yet, or no attributes.system: nothing of ours */
    user = user_duration (duration, rec);
    if (!rec || !(user < duration) || user <= 0. || start <= 0.
        || expiration <= 0.)
        return; /* no grace was added, or no limit */
    e = start + user;
    if (e >= expiration - EPSILON)
        return; /* E already (a restart replays the resource-update) */
    if (flux_jobtap_event_post_pack (p, id, "resource-update", "{s:f}",
                                     "expiration", e) < 0)
        flux_log_error (h, "gracewatch: job %s: cannot set its expiration to"
                        " its own limit %.3f: it ends %.3fs later",
                        f58 (id, ids, sizeof (ids)), e, expiration - e);
}

static int run_cb (flux_plugin_t *p, const char *topic,
                   flux_plugin_arg_t *args, void *arg);

static int validate_cb (flux_plugin_t *p,
                        const char *topic,
                        flux_plugin_arg_t *args,
                        void *arg)
{
    int state = 0;
    /* job.validate also runs on the jobspec of an update (the job is then
     * past NEW): that jobspec carries the user's request, which the
     * limits check; G is added in job.state.priority. */
    if (flux_plugin_arg_unpack (args, FLUX_PLUGIN_ARG_IN, "{s:i}",
                                "state", &state) == 0
        && state == FLUX_JOB_STATE_NEW)
        augment (p, args, 1, 0);
    return 0;
}

static int new_cb (flux_plugin_t *p,
                   const char *topic,
                   flux_plugin_arg_t *args,
                   void *arg)
{
    int state = 0;
    if (flux_plugin_arg_unpack (args, FLUX_PLUGIN_ARG_IN, "{s:i}",
                                "state", &state) < 0)
        return 0;
    /* At a restart of the job manager or the plugin's load. */
    if (state == FLUX_JOB_STATE_DEPEND || state == FLUX_JOB_STATE_PRIORITY
        || state == FLUX_JOB_STATE_SCHED)
        augment (p, args, 0, 1);
    else if (state == FLUX_JOB_STATE_RUN)
        run_cb (p, topic, args, arg);
    return 0;
}

static int priority_cb (flux_plugin_t *p,
                        const char *topic,
                        flux_plugin_arg_t *args,
                        void *arg)
{
    augment (p, args, 0, 0);
    return 0;
}

/* run_cb: the job has its resources. The exec system knows the job only
 * once its start request is sent, which a job-manager prolog delays; an
 * expiration update before it would fail (a severity-1 "exec" exception).
 * So the resource-update waits for the job's start event (job.event.start),
 * unless the job has started already (at the plugin's load). */
static int run_cb (flux_plugin_t *p,
                   const char *topic,
                   flux_plugin_arg_t *args,
                   void *arg)
{
    flux_jobid_t id;
    char ids[32];

    if (flux_plugin_arg_unpack (args, FLUX_PLUGIN_ARG_IN, "{s:I}",
                                "id", &id) < 0)
        return 0;
    if (flux_jobtap_job_event_posted (p, id, "start") > 0)
        end_at_user_limit (p, args);
    else if (flux_jobtap_job_subscribe (p, id) < 0)
        flux_log_error (flux_jobtap_get_flux (p),
                        "gracewatch: job %s: cannot watch for its start: it"
                        " ends at the scheduler's expiration",
                        f58 (id, ids, sizeof (ids)));
    return 0;
}

static int start_cb (flux_plugin_t *p,
                     const char *topic,
                     flux_plugin_arg_t *args,
                     void *arg)
{
    flux_jobid_t id;

    end_at_user_limit (p, args);
    if (flux_plugin_arg_unpack (args, FLUX_PLUGIN_ARG_IN, "{s:I}",
                                "id", &id) == 0)
        flux_jobtap_job_unsubscribe (p, id);
    return 0;
}

/* update_duration_cb: `flux update JOBID duration=T2`. The update is
 * allowed or refused by the job-manager's own update-duration plugin and
 * limits; this records that T2 is the user's own (grace 0), so that G is
 * added on top of it, and that the limits see T2, not T2 + G. */
static int update_duration_cb (flux_plugin_t *p,
                               const char *topic,
                               flux_plugin_arg_t *args,
                               void *arg)
{
    double v = -1.;
    if (flux_plugin_arg_unpack (args, FLUX_PLUGIN_ARG_IN, "{s:F}",
                                "value", &v) < 0 || v < 0.)
        return 0; /* the job-manager's update-duration refuses it */
    if (flux_plugin_arg_pack (args, FLUX_PLUGIN_ARG_OUT,
                              "{s:{s:{s:f s:f}}}",
                              "updates",
                                "attributes.system.gracewatch",
                                  "duration", v,
                                  "grace", 0.) < 0)
        return flux_jobtap_error (p, args, "gracewatch: cannot record the"
                                  " updated duration");
    return 0;
}

static const struct flux_plugin_handler tab[] = {
    { "conf.update", conf_update_cb, NULL },
    { "job.validate", validate_cb, NULL },
    { "job.new", new_cb, NULL },
    { "job.state.priority", priority_cb, NULL },
    { "job.state.run", run_cb, NULL },
    { "job.event.start", start_cb, NULL },
    { "job.update.attributes.system.duration", update_duration_cb, NULL },
    { 0 },
};

int flux_plugin_init (flux_plugin_t *p)
{
    return flux_plugin_register (p, "gracewatch", tab);
}

// vi:ts=4 sw=4 expandtab
