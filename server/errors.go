package server

import (
	"context"
	"errors"
	"log/slog"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tabletop-relay/relay/server/keys"
	"github.com/tabletop-relay/relay/wire"
	"github.com/tabletop-relay/relay/world"
)

// toStatus is the one place where errors become gRPC statuses. World and key
// errors carry messages meant for callers and keep them (a world error's
// cause, which may name paths or SQL, is logged, never shown); context
// errors keep their codes; anything else is an internal error whose details
// are logged, never shown.
func toStatus(ctx context.Context, log *slog.Logger, err error) error {
	if err == nil {
		return nil
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	var werr *world.Error
	if errors.As(err, &werr) {
		if werr.Cause != nil {
			// The cause may name paths or queries: the operator's to
			// read, never the caller's.
			log.ErrorContext(ctx, "world error", "error", werr.Msg, "cause", werr.Cause)
		}
		return worldStatus(werr)
	}
	switch {
	case errors.Is(err, keys.ErrInvalid):
		return status.Error(codes.InvalidArgument, err.Error())
	case errors.Is(err, keys.ErrNotFound):
		return status.Error(codes.NotFound, err.Error())
	case errors.Is(err, keys.ErrForbidden), errors.Is(err, keys.ErrSuspended):
		return status.Error(codes.PermissionDenied, err.Error())
	case errors.Is(err, keys.ErrAccountInvalid):
		return status.Error(codes.InvalidArgument, err.Error())
	case errors.Is(err, keys.ErrAccountNotFound):
		return status.Error(codes.NotFound, err.Error())
	case errors.Is(err, keys.ErrAccountExists), errors.Is(err, keys.ErrWorldClaimed):
		return status.Error(codes.AlreadyExists, err.Error())
	case errors.Is(err, keys.ErrOperatorAccount):
		return status.Error(codes.FailedPrecondition, err.Error())
	case errors.Is(err, keys.ErrMissing), errors.Is(err, keys.ErrUnknown), errors.Is(err, keys.ErrDisabled),
		errors.Is(err, keys.ErrRevoked), errors.Is(err, keys.ErrExpired):
		return status.Error(codes.Unauthenticated, err.Error())
	case errors.Is(err, context.DeadlineExceeded):
		return status.Error(codes.DeadlineExceeded, "The request timed out")
	case errors.Is(err, context.Canceled):
		return status.Error(codes.Canceled, "The request was cancelled")
	}
	log.ErrorContext(ctx, "internal error", "err", err)
	return status.Error(codes.Internal, "Internal error")
}

// worldStatus maps a world error kind to its code.
func worldStatus(err *world.Error) error {
	code := codes.Internal
	switch err.Kind {
	case world.ErrInvalid:
		code = codes.InvalidArgument
	case world.ErrNotFound:
		code = codes.NotFound
	case world.ErrPermission:
		code = codes.PermissionDenied
	case world.ErrConflict:
		code = codes.AlreadyExists
	case world.ErrFailedPrecondition:
		code = codes.FailedPrecondition
	case world.ErrUnavailable:
		code = codes.Unavailable
	case world.ErrTimeout:
		code = codes.DeadlineExceeded
	case world.ErrUnimplemented:
		// A world that does not offer the operation (HTTP 501).
		code = codes.Unimplemented
	case world.ErrTooLarge:
		return withReason(codes.ResourceExhausted, err.Msg, wire.ReasonTooLarge)
	}
	return status.Error(code, err.Msg)
}

// withReason builds a status carrying an ErrorInfo reason.
func withReason(code codes.Code, msg, reason string) error {
	st := status.New(code, msg)
	if detailed, err := st.WithDetails(&errdetails.ErrorInfo{Reason: reason, Domain: wire.ErrorDomain}); err == nil {
		st = detailed
	}
	return st.Err()
}
