// Package limitertest runs the client's transport against this project's
// Limiter itself: a module of its own, so that the client module, which
// a project may require alone, needs nothing beyond the standard library.
package limitertest
