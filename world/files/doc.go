// Package files is a world's file area: the directory
// `<data>/worlds/<clientId>/files/` holding the maps, token images and
// handouts the world's documents refer to by relative path
// (`maps/tavern.svg`).
//
// No path given to an [Area] can reach outside it. Paths are checked as
// text first ([Clean]: no `..`, no absolute path, no encoded traversal such
// as `%2e%2e%2f`, no NUL or other control character, no backslash, no
// over-long name), then every file operation goes through an [os.Root], so
// a symbolic link that points outside the area (or any other escape the
// kernel sees) is refused too. A refused path is ErrInvalid and touches
// nothing.
//
// Reads stream from the open file; nothing loads a whole file in memory.
// Writes are atomic: the bytes go to a temporary file in the target's own
// directory, are flushed to disk, and the file is then renamed (or, when
// overwriting is not allowed, hard-linked, which fails if the name was taken
// meanwhile) into place, so a reader sees the old file or the new one and
// never half of one. The size limit is enforced while the bytes arrive.
package files
