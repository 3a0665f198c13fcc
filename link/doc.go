// Package link connects real tabletops to the relay. A game master's
// tabletop running the REST API module becomes a linked world: it is paired
// once with a one-time code, then holds one WebSocket to the relay's `/relay`
// endpoint and answers the relay's requests on it.
//
// The package has five parts:
//
//   - Pairing ([Pairings], over a [Store]): one-time pairing codes, connection
//     tokens (kept only as SHA-256 hashes, one valid token per world) and the
//     record of each linked world. [SQLiteStore] keeps them in the relay's
//     relay.db; the Store interface is small so that a cluster can keep them
//     elsewhere.
//   - The HTTP side ([Service.Handler]): `/relay`, where the module connects
//     and authenticates with its first message, and the plain HTTP endpoints
//     the module calls around it: `POST /auth/pair`, `POST /api/self-unpair`
//     and `GET /api/clients/{clientId}/active`. They authenticate by code or
//     token, never by API key, and are limited per client address.
//   - The connections ([Hub]): clientId → live connection, with [Hub.Call],
//     which sends one request and waits for the reply that carries its
//     requestId, however many are in flight; the events the module sends;
//     the world's users from its `player-list`; and the event channels the
//     module should turn on.
//   - The event streams ([Events]): the module's event messages rebuilt in
//     the relay's own event shapes (eventshape.go), judged for each
//     subscriber with what the relay knows of the documents
//     (eventaccess.go), and the last events of each world kept for resume,
//     across restarts in an [EventJournal].
//   - A simulated tabletop for tests and demos, in package link/linktest.
//
// Failures of [Hub.Call] are world errors (package world) as well as link
// errors: a world that is not connected, or that disconnects while a request
// waits, is world.ErrUnavailable (503), one that does not answer in time
// world.ErrTimeout (504). So a linked world's operations can return them as
// they are.
//
// The package imports the world package's types and the WebSocket library,
// never the generated API or the server: the server reaches linked worlds
// through interfaces.
package link
