package releases

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"
)

// Where a List came from.
const (
	OriginFactory = "image factory"
	OriginCache   = "cache"
	OriginConfig  = "config"
)

// KV bucket and key of the cached factory list.
const (
	kvBucket = "releases"
	kvTalos  = "talos"
)

// fetchTimeout bounds one read of the factory: a command that needs the
// list must not wait for a hung factory longer than this.
const fetchTimeout = 15 * time.Second

// retryAfterFailure is the least time between two reads of a factory that
// failed, so that an outage costs one timeout per period, not per command.
const retryAfterFailure = 5 * time.Minute

// Fetcher lists the Talos versions Image Factory serves
// (factory.Client.Versions).
type Fetcher interface {
	Versions(ctx context.Context) ([]string, error)
}

// List is the Talos releases the bot knows, and where they came from.
type List struct {
	// Versions are the known releases, ascending (pre-releases dropped).
	Versions []Version
	// Origin is OriginFactory (read just now or within the refresh
	// period, and no read has failed since), OriginCache (the last list
	// the factory gave: a read failed, or it is older than Refresh and not
	// read again yet) or OriginConfig (releases.talos: no factory, or
	// nothing cached yet).
	Origin string
	// URL is the factory the list came from ("" for OriginConfig).
	URL string
	// FetchedAt is when the factory gave the list (zero for OriginConfig).
	FetchedAt time.Time
	// Err is why the factory could not be read, when it could not.
	Err error
	// Configured is releases.talos; with ListedOnly it is the allow-list.
	Configured []Version
	ListedOnly bool
}

// Age is how old the list is (0 for the configured list, which is as
// current as the configuration).
func (l *List) Age(now time.Time) time.Duration {
	if l.FetchedAt.IsZero() {
		return 0
	}
	return max(0, now.Sub(l.FetchedAt))
}

// Describe says where the list came from and how old it is, for chat.
func (l *List) Describe(now time.Time) string {
	switch l.Origin {
	case OriginFactory:
		return fmt.Sprintf("Image Factory %s, read %s ago", l.URL, Ago(l.Age(now)))
	case OriginCache:
		return fmt.Sprintf("cached Image Factory list, %s old (%s could not be read: %v)", Ago(l.Age(now)), l.URL, l.Err)
	default:
		if l.Err != nil {
			return fmt.Sprintf("releases.talos only (%s could not be read and nothing is cached: %v)", l.URL, l.Err)
		}
		return "releases.talos (no Image Factory configured)"
	}
}

// Targets are the versions upgrades may target or pass through: the
// allow-list with releases.listed_only; otherwise every known release,
// the factory's (or its cache's) together with the declared releases.talos,
// so that a release the factory does not list yet can be declared.
func (l *List) Targets() []Version {
	if l.ListedOnly {
		return slices.Clone(l.Configured)
	}
	out := append(slices.Clone(l.Versions), l.Configured...)
	slices.SortFunc(out, Version.Compare)
	return slices.Compact(out)
}

// Allowed refuses (R10) a target that is not a known release, or, with
// releases.listed_only, not in releases.talos (CheckTarget).
func (l *List) Allowed(v Version) error {
	return CheckTarget(KindTalos, v, l.Targets(), l.Versions, l.ListedOnly)
}

// Ago spells a duration for humans: "45s", "3m", "5h", "2d".
func Ago(d time.Duration) string {
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh", int(d.Hours()))
	default:
		return fmt.Sprintf("%dd", int(d.Hours()/24))
	}
}

// cached is the store's copy of the last list the factory gave.
type cached struct {
	URL       string    `json:"url"`
	Versions  []string  `json:"versions"`
	FetchedAt time.Time `json:"fetched_at"`
}

// KVStore keeps small values across restarts. The bot's store
// (state.Store) implements it; this package takes the interface so that the
// plugins, which link this package for its version rules and planning, link
// no store (hack/check-packages.sh checks).
type KVStore interface {
	// LoadKV returns the value, or nil when there is none.
	LoadKV(ctx context.Context, bucket, key string) ([]byte, error)
	SaveKV(ctx context.Context, bucket, key string, val []byte) error
}

// Source gives the current List: from Image Factory, read at most once per
// Refresh and cached in the store; on an outage the cached list with its
// age; with neither, the configured releases.talos.
type Source struct {
	// Fetcher is the factory; nil: the configured list only.
	Fetcher Fetcher
	// URL names the factory in messages and in the cache (a cache of
	// another URL is not used).
	URL string
	// Store caches the last list the factory gave (the bot's state.Store
	// implements it); nil: no cache.
	Store      KVStore
	Configured []string
	ListedOnly bool
	Refresh    time.Duration
	Now        func() time.Time
	// After is Run's timer (nil: time.After), injectable like Now so that
	// a test can see how long Run waits and wake it without sleeping.
	After func(d time.Duration) <-chan time.Time

	// configured is Configured parsed, once: it is set at construction
	// and read on every command.
	configuredOnce sync.Once
	configured     []Version

	// fetchMu lets one read of the factory run at a time; mu guards the
	// failure state only, so Cached never waits for a read in flight.
	fetchMu    sync.Mutex
	mu         sync.Mutex
	lastFailed time.Time
	lastErr    error
}

func (s *Source) failure() (time.Time, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lastFailed, s.lastErr
}

func (s *Source) setFailure(at time.Time, err error) {
	s.mu.Lock()
	s.lastFailed, s.lastErr = at, err
	s.mu.Unlock()
}

// Talos returns the current list, reading the factory when the cached
// copy is older than Refresh (and the factory did not just fail).
func (s *Source) Talos(ctx context.Context) (*List, error) {
	l, _, err := s.get(ctx, false)
	return l, err
}

// RefreshNow reads the factory now, whatever the age of the cache.
func (s *Source) RefreshNow(ctx context.Context) (*List, error) {
	l, _, err := s.get(ctx, true)
	return l, err
}

// Cached returns the current list without contacting the factory: the
// cache (as OriginCache once older than Refresh, or after a failed read,
// with that failure), else the configured list. Commands use it, so that a
// slow factory never delays one; Run keeps the cache fresh.
func (s *Source) Cached(ctx context.Context) (*List, error) {
	k, err := s.load(ctx)
	if err != nil {
		return nil, err
	}
	return s.list(k, s.now())
}

// Run keeps the cache fresh until ctx ends. It reads through the cache,
// not by force, so a restart with a fresh cache does not read the factory;
// and it wakes when the cache is due (Refresh after FetchedAt), or
// retryAfterFailure after a failed read, not a full Refresh from now.
func (s *Source) Run(ctx context.Context) {
	if s.Fetcher == nil {
		return
	}
	after := s.After
	if after == nil {
		after = time.After
	}
	for {
		// Without a due time (the store could not be read), try again
		// as after a failed read.
		wait := min(s.Refresh, retryAfterFailure)
		if _, next, _ := s.get(ctx, false); !next.IsZero() {
			wait = max(next.Sub(s.now()), 0)
		}
		select {
		case <-ctx.Done():
			return
		case <-after(wait):
		}
	}
}

func (s *Source) now() time.Time {
	if s.Now != nil {
		return s.Now()
	}
	return time.Now()
}

func (s *Source) parsedConfigured() []Version {
	s.configuredOnce.Do(func() { s.configured = ParseAll(s.Configured) })
	return s.configured
}

// known is what the source knows without contacting the factory.
type known struct {
	base  *List   // releases.talos, listed_only and the URL
	cache *cached // the factory's last list; nil: none (or another factory's)
	// failedAt and failErr are the last read's failure; zero once a read
	// succeeds.
	failedAt time.Time
	failErr  error
}

// load gathers what Cached and get both start from.
func (s *Source) load(ctx context.Context) (*known, error) {
	// A copy per List: a caller may change its List, not the source.
	k := &known{base: &List{Configured: slices.Clone(s.parsedConfigured()), ListedOnly: s.ListedOnly, URL: s.URL}}
	k.failedAt, k.failErr = s.failure()
	if s.Fetcher == nil {
		return k, nil
	}
	c, err := s.loadCache(ctx)
	if err != nil {
		return nil, err
	}
	k.cache = c
	return k, nil
}

// fresh is the one freshness rule: the cache is younger than Refresh. A
// FetchedAt in the future (the clock went back) is not fresh, so that such
// a cache is read again rather than trusted until the clock catches up.
func (s *Source) fresh(c *cached, now time.Time) bool {
	return c != nil && !c.FetchedAt.After(now) && now.Sub(c.FetchedAt) < s.Refresh
}

// nextRead is when the factory is next to be read: once the cache stops
// being fresh, and not within retryAfterFailure of a failed read. It is
// now or earlier when a read is due.
func (s *Source) nextRead(k *known, now time.Time) time.Time {
	at := now
	if s.fresh(k.cache, now) {
		at = k.cache.FetchedAt.Add(s.Refresh)
	}
	if !k.failedAt.IsZero() {
		if retry := k.failedAt.Add(retryAfterFailure); retry.After(at) {
			at = retry
		}
	}
	return at
}

// list is the List from what is known, without a read: the cache is
// OriginFactory only while fresh and no read has failed since; otherwise
// it is OriginCache with the failure (Cached and Talos agree on this).
func (s *Source) list(k *known, now time.Time) (*List, error) {
	base := k.base
	if s.Fetcher == nil {
		base.Origin, base.Versions, base.URL = OriginConfig, base.Configured, ""
		return base, nil
	}
	if k.cache == nil {
		why := k.failErr
		if why == nil {
			why = errors.New("not read yet")
		}
		return s.fallback(base, why)
	}
	l := fromCache(base, k.cache)
	if !s.fresh(k.cache, now) || k.failErr != nil {
		l.Origin, l.Err = OriginCache, k.failErr
		if l.Err == nil {
			l.Err = errors.New("not read again yet")
		}
	}
	return l, nil
}

// get returns the list, reading the factory when forced or due, and when
// the factory is next due (zero when that is unknown: the store failed).
func (s *Source) get(ctx context.Context, force bool) (*List, time.Time, error) {
	s.fetchMu.Lock()
	defer s.fetchMu.Unlock()
	now := s.now()
	k, err := s.load(ctx)
	if err != nil {
		return nil, time.Time{}, err
	}
	if s.Fetcher == nil || (!force && s.nextRead(k, now).After(now)) {
		l, err := s.list(k, now)
		return l, s.nextRead(k, now), err
	}
	fctx, cancel := context.WithTimeout(ctx, fetchTimeout)
	got, ferr := s.Fetcher.Versions(fctx)
	cancel()
	vs := ParseAll(got)
	if ferr == nil && len(vs) == 0 {
		ferr = fmt.Errorf("the factory listed no releases (%d entries)", len(got))
	}
	if ferr != nil {
		s.setFailure(now, ferr)
		k.failedAt, k.failErr = now, ferr
		l, err := s.list(k, now)
		return l, s.nextRead(k, now), err
	}
	s.setFailure(time.Time{}, nil)
	nc := cached{URL: s.URL, Versions: Tags(vs), FetchedAt: now}
	if err := s.saveCache(ctx, nc); err != nil {
		return nil, time.Time{}, err
	}
	k.cache, k.failedAt, k.failErr = &nc, time.Time{}, nil
	l, err := s.list(k, now)
	return l, s.nextRead(k, now), err
}

func fromCache(base *List, c *cached) *List {
	l := *base
	l.Origin, l.Versions, l.FetchedAt = OriginFactory, ParseAll(c.Versions), c.FetchedAt
	return &l
}

func (s *Source) fallback(base *List, why error) (*List, error) {
	if len(base.Configured) == 0 {
		return nil, fmt.Errorf("no Talos release list: Image Factory %s could not be read (%w), nothing is cached, and releases.talos is empty; add the releases you use to releases.talos as an offline fallback", s.URL, why)
	}
	base.Origin, base.Versions, base.Err = OriginConfig, base.Configured, why
	return base, nil
}

func (s *Source) loadCache(ctx context.Context) (*cached, error) {
	if s.Store == nil {
		return nil, nil
	}
	raw, err := s.Store.LoadKV(ctx, kvBucket, kvTalos)
	if err != nil {
		return nil, fmt.Errorf("read the cached release list: %w", err)
	}
	if raw == nil {
		return nil, nil
	}
	var c cached
	if json.Unmarshal(raw, &c) != nil || c.URL != s.URL {
		return nil, nil // unreadable, or another factory's: as if none
	}
	return &c, nil
}

func (s *Source) saveCache(ctx context.Context, c cached) error {
	raw, err := json.Marshal(c)
	if err != nil {
		return fmt.Errorf("encode the release list: %w", err)
	}
	if s.Store == nil {
		return nil
	}
	if err := s.Store.SaveKV(ctx, kvBucket, kvTalos, raw); err != nil {
		return fmt.Errorf("cache the release list: %w", err)
	}
	return nil
}
