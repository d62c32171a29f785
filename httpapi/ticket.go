package httpapi

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"net/http"
	"sync"
	"time"
)

// Attach tickets: a browser cannot set headers on a WebSocket, so the page
// asks for a ticket (POST /v1/sessions/{id}/attach-ticket, with its
// credential) and passes it as ?ticket= on the upgrade. A ticket works
// once, within AttachTicketTTL, for that session only, and only while the
// credential that asked for it is valid.

// Bounds of attach tickets.
const (
	// AttachTicketTTL is how long an attach ticket can be used (once).
	AttachTicketTTL = 30 * time.Second
	// maxAttachTickets bounds the outstanding tickets; past it the one
	// that expires first goes.
	maxAttachTickets = 256
	// ticketBytes is the entropy of a ticket.
	ticketBytes = 24
)

// AttachTicket is the answer of POST /v1/sessions/{id}/attach-ticket.
type AttachTicket struct {
	// Ticket goes in ?ticket= of the attach request.
	Ticket string `json:"ticket"`
	// ExpiresIn is its lifetime in seconds.
	ExpiresIn int `json:"expires_in"`
}

// ticket is one outstanding ticket.
type ticket struct {
	session string
	page    string // the page credential's id; "" for the token
	expires time.Time
}

func (t ticket) expiry() time.Time { return t.expires }

// expiring is what makeRoom keeps: a single-use credential with an
// expiry.
type expiring interface{ expiry() time.Time }

// makeRoom drops the expired entries of m and, when it still holds max,
// the one that expires first, so that one more fits.
func makeRoom[K comparable, V expiring](m map[K]V, now time.Time, max int) {
	var first K
	var firstAt time.Time
	for k, v := range m {
		if !now.Before(v.expiry()) {
			delete(m, k)
			continue
		}
		if firstAt.IsZero() || v.expiry().Before(firstAt) {
			first, firstAt = k, v.expiry()
		}
	}
	if len(m) >= max {
		delete(m, first)
	}
}

// attachTickets holds the outstanding tickets by hash. The zero value is
// ready to use.
type attachTickets struct {
	mu      sync.Mutex
	tickets map[[sha256.Size]byte]ticket
}

// add makes a ticket for session on behalf of page.
func (a *attachTickets) add(now time.Time, session, page string) (string, error) {
	b := make([]byte, ticketBytes)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("attach ticket: %w", err)
	}
	tk := base64.RawURLEncoding.EncodeToString(b)
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.tickets == nil {
		a.tickets = map[[sha256.Size]byte]ticket{}
	}
	makeRoom(a.tickets, now, maxAttachTickets)
	a.tickets[sha256.Sum256([]byte(tk))] = ticket{session: session, page: page, expires: now.Add(AttachTicketTTL)}
	return tk, nil
}

// use consumes tk and returns it if it was known and unexpired.
func (a *attachTickets) use(now time.Time, tk string) (ticket, bool) {
	h := sha256.Sum256([]byte(tk))
	a.mu.Lock()
	defer a.mu.Unlock()
	t, ok := a.tickets[h]
	if !ok {
		return ticket{}, false
	}
	delete(a.tickets, h)
	return t, now.Before(t.expires)
}

// createAttachTicket: POST /v1/sessions/{id}/attach-ticket → 201 with an
// AttachTicket bound to the session and the caller's credential.
func (s *Server) createAttachTicket(w http.ResponseWriter, r *http.Request) error {
	tk, err := s.tickets.add(time.Now(), r.PathValue("id"), principalOf(r).page)
	if err != nil {
		return err
	}
	w.Header().Set("Cache-Control", "no-store")
	writeJSON(w, http.StatusCreated, AttachTicket{Ticket: tk, ExpiresIn: int(AttachTicketTTL / time.Second)})
	return nil
}

// ticketAuthorized consumes the request's ?ticket= and says whether it
// admits the request to attach to session.
func (s *Server) ticketAuthorized(r *http.Request, session string) bool {
	q := r.URL.Query()
	if !q.Has("ticket") {
		return false
	}
	now := time.Now()
	t, ok := s.tickets.use(now, q.Get("ticket"))
	if !ok || t.session != session {
		return false
	}
	return t.page == "" || s.pages.alive(now, t.page)
}
