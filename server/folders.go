package server

import (
	"context"

	relayv1 "github.com/tabletop-relay/relay/gen/go/relay/v1"
	"github.com/tabletop-relay/relay/world"
)

// folderService implements relayv1.FolderServiceServer over the world.
type folderService struct {
	relayv1.UnimplementedFolderServiceServer
}

func (folderService) CreateFolder(ctx context.Context, req *relayv1.CreateFolderRequest) (*relayv1.CreateFolderResponse, error) {
	folders, call, err := capability[world.Folders](ctx)
	if err != nil {
		return nil, err
	}
	f, err := folders.CreateFolder(ctx, call.User, world.FolderParams{
		Name:     req.GetName(),
		Type:     req.GetFolderType(),
		ParentID: req.GetParentFolderId(),
		ID:       req.GetFolderId(),
	})
	if err != nil {
		return nil, err
	}
	str := func(k string) string { s, _ := f[k].(string); return s }
	return &relayv1.CreateFolderResponse{
		Id:           str("id"),
		Uuid:         str("uuid"),
		Name:         str("name"),
		Type:         str("type"),
		ParentFolder: str("parentFolder"),
	}, nil
}

func (folderService) DeleteFolder(ctx context.Context, req *relayv1.DeleteFolderRequest) (*relayv1.DeleteFolderResponse, error) {
	folders, call, err := capability[world.Folders](ctx)
	if err != nil {
		return nil, err
	}
	d, err := folders.DeleteFolder(ctx, call.User, req.GetFolderId(), req.GetDeleteAll())
	if err != nil {
		return nil, err
	}
	return &relayv1.DeleteFolderResponse{
		Deleted:         true,
		FolderId:        d.FolderID,
		EntitiesDeleted: int32(d.EntitiesDeleted),
		FoldersDeleted:  int32(d.FoldersDeleted),
	}, nil
}
