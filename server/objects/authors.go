package objects

import (
	"context"
	"time"

	"github.com/objwatch/objwatch/server/history"
	"github.com/objwatch/objwatch/storage"
)

// serverUser names the server itself as an author: its writes that no
// controller makes (the bootstrap's).
const serverUser = "system:objwatch"

// noted returns ctx whose storage writes carry req's author note
// (Config.AuthorNotes): the user and groups of the request, or for the
// server's own writes the controller making them, with the verb, the
// field manager and this server's name. The history's recorder reads it,
// from etcd or handed over in process (Config.Authors).
func (s *Service) noted(ctx context.Context, req *Request, manager string) context.Context {
	if !s.cfg.AuthorNotes {
		return ctx
	}
	a := history.Author{Verb: req.Verb, Manager: manager, Server: s.cfg.ServerName}
	switch {
	case req.User != nil:
		a.User, a.Groups = req.User.Name, req.User.Groups
	case req.Actor != "":
		a.User = req.Actor
	default:
		a.User = serverUser
	}
	if s.cfg.Authors != nil {
		return storage.WithNote(ctx, s.cfg.Authors.Note(a, time.Now()))
	}
	return storage.WithNote(ctx, history.AuthorNote(a, time.Now()))
}
