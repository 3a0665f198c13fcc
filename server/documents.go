package server

import (
	"context"

	relayv1 "relay/gen/go/relay/v1"
	"relay/world"
)

// documentService implements relayv1.DocumentServiceServer over the world.
type documentService struct {
	relayv1.UnimplementedDocumentServiceServer
}

func (documentService) GetDocument(ctx context.Context, req *relayv1.GetDocumentRequest) (*relayv1.GetDocumentResponse, error) {
	call := CallFrom(ctx)
	raw, err := call.World.GetJSON(ctx, call.User, req.GetUuid())
	if err != nil {
		return nil, err
	}
	return &relayv1.GetDocumentResponse{Document: raw}, nil
}

func (documentService) UpdateDocument(ctx context.Context, req *relayv1.UpdateDocumentRequest) (*relayv1.UpdateDocumentResponse, error) {
	call := CallFrom(ctx)
	if req.GetData() == nil {
		return nil, world.Errorf(world.ErrInvalid, "'data' is required")
	}
	raw, err := call.World.UpdateJSON(ctx, call.User, req.GetUuid(), fromStruct(req.GetData()))
	if err != nil {
		return nil, err
	}
	return &relayv1.UpdateDocumentResponse{Uuid: req.GetUuid(), Document: raw}, nil
}

func (documentService) CreateDocument(ctx context.Context, req *relayv1.CreateDocumentRequest) (*relayv1.CreateDocumentResponse, error) {
	call := CallFrom(ctx)
	if req.GetData() == nil {
		return nil, world.Errorf(world.ErrInvalid, "'data' is required")
	}
	doc, err := call.World.Create(ctx, call.User, world.CreateParams{
		Type:       req.GetEntityType(),
		Data:       fromStruct(req.GetData()),
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
	call := CallFrom(ctx)
	if err := call.World.Delete(ctx, call.User, req.GetUuid()); err != nil {
		return nil, err
	}
	return &relayv1.DeleteDocumentResponse{Uuid: req.GetUuid(), Deleted: true}, nil
}

func (documentService) SearchDocuments(ctx context.Context, req *relayv1.SearchDocumentsRequest) (*relayv1.SearchDocumentsResponse, error) {
	call := CallFrom(ctx)
	results, err := call.World.Search(ctx, call.User, world.SearchParams{
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
	call := CallFrom(ctx)
	tree, err := call.World.Structure(ctx, call.User, world.StructureParams{
		Types:       req.GetTypes(),
		Path:        req.GetPath(),
		Recursive:   req.GetRecursive(),
		Depth:       int(req.GetRecursiveDepth()),
		IncludeData: req.GetIncludeEntityData(),
	})
	if err != nil {
		return nil, err
	}
	raw, err := toJSON(tree)
	if err != nil {
		return nil, err
	}
	return &relayv1.GetStructureResponse{Structure: raw}, nil
}

func (documentService) GiveItem(ctx context.Context, req *relayv1.GiveItemRequest) (*relayv1.GiveItemResponse, error) {
	call := CallFrom(ctx)
	res, err := call.World.Give(ctx, call.User, world.GiveParams{
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
	call := CallFrom(ctx)
	res, err := call.World.Remove(ctx, call.User, world.RemoveParams{
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
	call := CallFrom(ctx)
	if req.Amount == nil {
		return nil, world.Errorf(world.ErrInvalid, "'amount' is required")
	}
	ch, err := call.World.ModifyAttribute(ctx, call.User, req.GetUuid(), req.GetAttribute(), -req.GetAmount())
	if err != nil {
		return nil, err
	}
	return &relayv1.DecreaseAttributeResponse{Uuid: ch.UUID, Attribute: ch.Attribute, OldValue: ch.OldValue, NewValue: ch.NewValue}, nil
}

func (documentService) IncreaseAttribute(ctx context.Context, req *relayv1.IncreaseAttributeRequest) (*relayv1.IncreaseAttributeResponse, error) {
	call := CallFrom(ctx)
	if req.Amount == nil {
		return nil, world.Errorf(world.ErrInvalid, "'amount' is required")
	}
	ch, err := call.World.ModifyAttribute(ctx, call.User, req.GetUuid(), req.GetAttribute(), req.GetAmount())
	if err != nil {
		return nil, err
	}
	return &relayv1.IncreaseAttributeResponse{Uuid: ch.UUID, Attribute: ch.Attribute, OldValue: ch.OldValue, NewValue: ch.NewValue}, nil
}

func (documentService) Kill(ctx context.Context, req *relayv1.KillRequest) (*relayv1.KillResponse, error) {
	call := CallFrom(ctx)
	res, err := call.World.Kill(ctx, call.User, req.GetUuid())
	if err != nil {
		return nil, err
	}
	return &relayv1.KillResponse{Uuid: res.UUID, Message: res.Message}, nil
}
