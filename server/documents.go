package server

import (
	"context"

	relayv1 "github.com/tabletop-relay/relay/gen/go/relay/v1"
	"github.com/tabletop-relay/relay/jsonvalue"
	"github.com/tabletop-relay/relay/world"
)

// documentService implements relayv1.DocumentServiceServer over the world.
type documentService struct {
	relayv1.UnimplementedDocumentServiceServer
}

func (documentService) GetDocument(ctx context.Context, req *relayv1.GetDocumentRequest) (*relayv1.GetDocumentResponse, error) {
	docs, call, err := capability[world.Documents](ctx)
	if err != nil {
		return nil, err
	}
	raw, err := docs.GetJSON(ctx, call.User, req.GetUuid())
	if err != nil {
		return nil, err
	}
	return &relayv1.GetDocumentResponse{Document: jsonvalue.Raw(raw)}, nil
}

func (documentService) UpdateDocument(ctx context.Context, req *relayv1.UpdateDocumentRequest) (*relayv1.UpdateDocumentResponse, error) {
	docs, call, err := capability[world.Documents](ctx)
	if err != nil {
		return nil, err
	}
	if req.GetData() == nil {
		return nil, world.Errorf(world.ErrInvalid, "'data' is required")
	}
	data, err := fromStruct("data", req.GetData())
	if err != nil {
		return nil, err
	}
	raw, err := docs.UpdateJSON(ctx, call.User, req.GetUuid(), data)
	if err != nil {
		return nil, err
	}
	return &relayv1.UpdateDocumentResponse{Uuid: req.GetUuid(), Document: jsonvalue.Raw(raw)}, nil
}

func (documentService) CreateDocument(ctx context.Context, req *relayv1.CreateDocumentRequest) (*relayv1.CreateDocumentResponse, error) {
	docs, call, err := capability[world.Documents](ctx)
	if err != nil {
		return nil, err
	}
	if req.GetData() == nil {
		return nil, world.Errorf(world.ErrInvalid, "'data' is required")
	}
	data, err := fromStruct("data", req.GetData())
	if err != nil {
		return nil, err
	}
	doc, err := docs.Create(ctx, call.User, world.CreateParams{
		Type:       req.GetEntityType(),
		Data:       data,
		Folder:     req.GetFolder(),
		ParentUUID: req.GetParentUuid(),
		KeepID:     req.GetKeepId(),
	})
	if err != nil {
		return nil, err
	}
	uuid, _ := doc["uuid"].(string)
	raw, err := toJSON(doc)
	if err != nil {
		return nil, err
	}
	return &relayv1.CreateDocumentResponse{Uuid: uuid, Document: raw}, nil
}

func (documentService) DeleteDocument(ctx context.Context, req *relayv1.DeleteDocumentRequest) (*relayv1.DeleteDocumentResponse, error) {
	docs, call, err := capability[world.Documents](ctx)
	if err != nil {
		return nil, err
	}
	if err := docs.Delete(ctx, call.User, req.GetUuid()); err != nil {
		return nil, err
	}
	return &relayv1.DeleteDocumentResponse{Uuid: req.GetUuid(), Deleted: true}, nil
}

func (documentService) SearchDocuments(ctx context.Context, req *relayv1.SearchDocumentsRequest) (*relayv1.SearchDocumentsResponse, error) {
	search, call, err := capability[world.DocumentSearch](ctx)
	if err != nil {
		return nil, err
	}
	results, err := search.Search(ctx, call.User, world.SearchParams{
		Query:  req.GetQuery(),
		Filter: req.GetFilter(),
		Limit:  int(req.GetLimit()),
	})
	if err != nil {
		return nil, err
	}
	if results == nil {
		results = []world.Document{}
	}
	raw, err := toJSON(results)
	if err != nil {
		return nil, err
	}
	return &relayv1.SearchDocumentsResponse{Query: req.GetQuery(), Filter: req.GetFilter(), Results: raw}, nil
}

func (documentService) GetStructure(ctx context.Context, req *relayv1.GetStructureRequest) (*relayv1.GetStructureResponse, error) {
	folders, call, err := capability[world.Folders](ctx)
	if err != nil {
		return nil, err
	}
	var module bool
	switch req.GetShape() {
	case "", "spec":
	case "module":
		module = true
	default:
		return nil, world.Errorf(world.ErrInvalid, "'shape' must be spec or module, not %s", req.GetShape())
	}
	tree, err := folders.Structure(ctx, call.User, world.StructureParams{
		Types:       req.GetTypes(),
		Path:        req.GetPath(),
		Recursive:   req.GetRecursive(),
		Depth:       int(req.GetRecursiveDepth()),
		IncludeData: req.GetIncludeEntityData(),
	})
	if err != nil {
		return nil, err
	}
	if module {
		tree = world.ModuleStructure(tree, req.GetPath() != "")
	}
	raw, err := toJSON(tree)
	if err != nil {
		return nil, err
	}
	return &relayv1.GetStructureResponse{Structure: raw}, nil
}

func (documentService) GiveItem(ctx context.Context, req *relayv1.GiveItemRequest) (*relayv1.GiveItemResponse, error) {
	docs, call, err := capability[world.Documents](ctx)
	if err != nil {
		return nil, err
	}
	res, err := docs.Give(ctx, call.User, world.GiveParams{
		FromUUID: req.GetFromUuid(),
		ToUUID:   req.GetToUuid(),
		ItemUUID: req.GetItemUuid(),
		ItemName: req.GetItemName(),
		Quantity: req.GetQuantity(),
	})
	if err != nil {
		return nil, err
	}
	return &relayv1.GiveItemResponse{
		FromUuid:    res.FromUUID,
		ToUuid:      res.ToUUID,
		ItemUuid:    res.ItemUUID,
		NewItemUuid: res.NewItemUUID,
		Quantity:    res.Quantity,
	}, nil
}

func (documentService) RemoveItem(ctx context.Context, req *relayv1.RemoveItemRequest) (*relayv1.RemoveItemResponse, error) {
	docs, call, err := capability[world.Documents](ctx)
	if err != nil {
		return nil, err
	}
	res, err := docs.Remove(ctx, call.User, world.RemoveParams{
		ActorUUID: req.GetActorUuid(),
		ItemUUID:  req.GetItemUuid(),
		ItemName:  req.GetItemName(),
		Quantity:  req.GetQuantity(),
	})
	if err != nil {
		return nil, err
	}
	return &relayv1.RemoveItemResponse{
		ActorUuid: res.ActorUUID,
		ItemUuid:  res.ItemUUID,
		Quantity:  res.Quantity,
		Deleted:   res.Deleted,
	}, nil
}

func (documentService) DecreaseAttribute(ctx context.Context, req *relayv1.DecreaseAttributeRequest) (*relayv1.DecreaseAttributeResponse, error) {
	docs, call, err := capability[world.Documents](ctx)
	if err != nil {
		return nil, err
	}
	if req.Amount == nil {
		return nil, world.Errorf(world.ErrInvalid, "'amount' is required")
	}
	ch, err := docs.ModifyAttribute(ctx, call.User, req.GetUuid(), req.GetAttribute(), -req.GetAmount())
	if err != nil {
		return nil, err
	}
	return &relayv1.DecreaseAttributeResponse{Uuid: ch.UUID, Attribute: ch.Attribute, OldValue: ch.OldValue, NewValue: ch.NewValue}, nil
}

func (documentService) IncreaseAttribute(ctx context.Context, req *relayv1.IncreaseAttributeRequest) (*relayv1.IncreaseAttributeResponse, error) {
	docs, call, err := capability[world.Documents](ctx)
	if err != nil {
		return nil, err
	}
	if req.Amount == nil {
		return nil, world.Errorf(world.ErrInvalid, "'amount' is required")
	}
	ch, err := docs.ModifyAttribute(ctx, call.User, req.GetUuid(), req.GetAttribute(), req.GetAmount())
	if err != nil {
		return nil, err
	}
	return &relayv1.IncreaseAttributeResponse{Uuid: ch.UUID, Attribute: ch.Attribute, OldValue: ch.OldValue, NewValue: ch.NewValue}, nil
}

func (documentService) Kill(ctx context.Context, req *relayv1.KillRequest) (*relayv1.KillResponse, error) {
	docs, call, err := capability[world.Documents](ctx)
	if err != nil {
		return nil, err
	}
	res, err := docs.Kill(ctx, call.User, req.GetUuid())
	if err != nil {
		return nil, err
	}
	return &relayv1.KillResponse{Uuid: res.UUID, Message: res.Message}, nil
}
