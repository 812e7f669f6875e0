package daemon

import (
	"sync"
	"sync/atomic"
)

// campaignSet is the daemon's campaigns by id. Reads, on every SPEND, are one
// atomic load and a plain map lookup (no interface conversion, no lock);
// writes, once per campaign's first use, copy the map. A sync.Map cost a
// fifth of a SPEND's time here.
type campaignSet struct {
	mu sync.Mutex // serialises writers
	m  atomic.Pointer[map[string]*campaign]
}

func (s *campaignSet) get(id string) (*campaign, bool) {
	m := s.m.Load()
	if m == nil {
		return nil, false
	}
	c, ok := (*m)[id]
	return c, ok
}

// add stores c unless a campaign with its id is there already, and returns the
// one stored.
func (s *campaignSet) add(c *campaign) *campaign {
	s.mu.Lock()
	defer s.mu.Unlock()
	old := s.m.Load()
	if old != nil {
		if have, ok := (*old)[c.id]; ok {
			return have
		}
	}
	next := make(map[string]*campaign, 1+lenOf(old))
	if old != nil {
		for k, v := range *old {
			next[k] = v
		}
	}
	next[c.id] = c
	s.m.Store(&next)
	return c
}

func lenOf(m *map[string]*campaign) int {
	if m == nil {
		return 0
	}
	return len(*m)
}

// all returns a snapshot of the campaigns.
func (s *campaignSet) all() []*campaign {
	m := s.m.Load()
	if m == nil {
		return nil
	}
	out := make([]*campaign, 0, len(*m))
	for _, c := range *m {
		out = append(out, c)
	}
	return out
}

// each calls f for every campaign, without copying the set.
func (s *campaignSet) each(f func(*campaign)) {
	m := s.m.Load()
	if m == nil {
		return
	}
	for _, c := range *m {
		f(c)
	}
}

// removeAll removes each of cs (and not another campaign stored under its id
// since), in one copy of the set, and returns those it removed.
func (s *campaignSet) removeAll(cs []*campaign) []*campaign {
	s.mu.Lock()
	defer s.mu.Unlock()
	old := s.m.Load()
	if old == nil || len(cs) == 0 {
		return nil
	}
	gone := make(map[string]*campaign, len(cs))
	var removed []*campaign
	for _, c := range cs {
		if (*old)[c.id] == c {
			gone[c.id] = c
			removed = append(removed, c)
		}
	}
	if len(removed) == 0 {
		return nil
	}
	next := make(map[string]*campaign, len(*old)-len(removed))
	for k, v := range *old {
		if gone[k] != v {
			next[k] = v
		}
	}
	s.m.Store(&next)
	return removed
}
