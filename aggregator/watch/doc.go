// Package watch holds the view's changes as events (one per change of a
// node's served state), the bounded history of them that lets a watcher
// resume after a reconnection (Last-Event-ID), and the watchers'
// subscriptions, which never block the publisher: a watcher that falls a
// whole buffer behind is dropped.
package watch
