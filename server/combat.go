package server

import (
	"context"

	"google.golang.org/protobuf/types/known/wrapperspb"

	relayv1 "github.com/tabletop-relay/relay/gen/go/relay/v1"
	"github.com/tabletop-relay/relay/world"
)

// combatService implements relayv1.CombatServiceServer over the worlds'
// encounters ([world.Encounters]).
type combatService struct {
	relayv1.UnimplementedCombatServiceServer
}

func (combatService) ListEncounters(ctx context.Context, req *relayv1.ListEncountersRequest) (*relayv1.ListEncountersResponse, error) {
	encounters, call, err := capability[world.Encounters](ctx)
	if err != nil {
		return nil, err
	}
	list, err := encounters.ListEncounters(ctx, call.User)
	if err != nil {
		return nil, err
	}
	out := &relayv1.ListEncountersResponse{Encounters: make([]*relayv1.Encounter, 0, len(list))}
	for _, e := range list {
		out.Encounters = append(out.Encounters, encounterPB(e))
	}
	return out, nil
}

func (combatService) StartEncounter(ctx context.Context, req *relayv1.StartEncounterRequest) (*relayv1.StartEncounterResponse, error) {
	encounters, call, err := capability[world.Encounters](ctx)
	if err != nil {
		return nil, err
	}
	e, err := encounters.StartEncounter(ctx, call.User, world.StartEncounterParams{
		Name:         req.GetName(),
		TokenUUIDs:   req.GetTokenUuids(),
		WithSelected: req.GetStartWithSelected(),
		WithPlayers:  req.GetStartWithPlayers(),
		RollNPC:      req.GetRollNpc(),
		RollAll:      req.GetRollAll(),
	})
	if err != nil {
		return nil, err
	}
	return &relayv1.StartEncounterResponse{EncounterId: e.ID, Encounter: encounterPB(e)}, nil
}

func (combatService) EndEncounter(ctx context.Context, req *relayv1.EndEncounterRequest) (*relayv1.EndEncounterResponse, error) {
	encounters, call, err := capability[world.Encounters](ctx)
	if err != nil {
		return nil, err
	}
	id, err := encounters.EndEncounter(ctx, call.User, req.GetEncounterId())
	if err != nil {
		return nil, err
	}
	return &relayv1.EndEncounterResponse{EncounterId: id, Message: "Encounter successfully ended"}, nil
}

func (combatService) NextTurn(ctx context.Context, req *relayv1.NextTurnRequest) (*relayv1.NextTurnResponse, error) {
	p, err := navigate(ctx, req.GetEncounterId(), world.NextTurn)
	if err != nil {
		return nil, err
	}
	return &relayv1.NextTurnResponse{EncounterId: p.EncounterID, Action: string(p.Action), CurrentTurn: int32(p.Turn), CurrentRound: int32(p.Round),
		ActorTurn: p.ActorUUID, TokenTurn: p.TokenUUID, Encounter: encounterPB(p.Encounter)}, nil
}

func (combatService) NextRound(ctx context.Context, req *relayv1.NextRoundRequest) (*relayv1.NextRoundResponse, error) {
	p, err := navigate(ctx, req.GetEncounterId(), world.NextRound)
	if err != nil {
		return nil, err
	}
	return &relayv1.NextRoundResponse{EncounterId: p.EncounterID, Action: string(p.Action), CurrentTurn: int32(p.Turn), CurrentRound: int32(p.Round),
		ActorTurn: p.ActorUUID, TokenTurn: p.TokenUUID, Encounter: encounterPB(p.Encounter)}, nil
}

func (combatService) PreviousTurn(ctx context.Context, req *relayv1.PreviousTurnRequest) (*relayv1.PreviousTurnResponse, error) {
	p, err := navigate(ctx, req.GetEncounterId(), world.PreviousTurn)
	if err != nil {
		return nil, err
	}
	return &relayv1.PreviousTurnResponse{EncounterId: p.EncounterID, Action: string(p.Action), CurrentTurn: int32(p.Turn), CurrentRound: int32(p.Round),
		ActorTurn: p.ActorUUID, TokenTurn: p.TokenUUID, Encounter: encounterPB(p.Encounter)}, nil
}

func (combatService) PreviousRound(ctx context.Context, req *relayv1.PreviousRoundRequest) (*relayv1.PreviousRoundResponse, error) {
	p, err := navigate(ctx, req.GetEncounterId(), world.PreviousRound)
	if err != nil {
		return nil, err
	}
	return &relayv1.PreviousRoundResponse{EncounterId: p.EncounterID, Action: string(p.Action), CurrentTurn: int32(p.Turn), CurrentRound: int32(p.Round),
		ActorTurn: p.ActorUUID, TokenTurn: p.TokenUUID, Encounter: encounterPB(p.Encounter)}, nil
}

// navigate runs one turn or round move for the call's world and user.
func navigate(ctx context.Context, id string, action world.EncounterAction) (world.EncounterPosition, error) {
	encounters, call, err := capability[world.Encounters](ctx)
	if err != nil {
		return world.EncounterPosition{}, err
	}
	return encounters.NavigateEncounter(ctx, call.User, id, action)
}

func (combatService) AddToEncounter(ctx context.Context, req *relayv1.AddToEncounterRequest) (*relayv1.AddToEncounterResponse, error) {
	encounters, call, err := capability[world.Encounters](ctx)
	if err != nil {
		return nil, err
	}
	res, err := encounters.AddToEncounter(ctx, call.User, world.EncounterMembersParams{
		EncounterID:    req.GetEncounterId(),
		UUIDs:          req.GetUuids(),
		Selected:       req.GetSelected(),
		RollInitiative: req.GetRollInitiative(),
	})
	if err != nil {
		return nil, err
	}
	return &relayv1.AddToEncounterResponse{EncounterId: res.EncounterID, Added: res.Done, Failed: failedPB(res.Failed)}, nil
}

func (combatService) RemoveFromEncounter(ctx context.Context, req *relayv1.RemoveFromEncounterRequest) (*relayv1.RemoveFromEncounterResponse, error) {
	encounters, call, err := capability[world.Encounters](ctx)
	if err != nil {
		return nil, err
	}
	res, err := encounters.RemoveFromEncounter(ctx, call.User, world.EncounterMembersParams{
		EncounterID: req.GetEncounterId(),
		UUIDs:       req.GetUuids(),
		Selected:    req.GetSelected(),
	})
	if err != nil {
		return nil, err
	}
	return &relayv1.RemoveFromEncounterResponse{EncounterId: res.EncounterID, Removed: res.Done, Failed: failedPB(res.Failed)}, nil
}

// encounterPB converts an encounter summary.
func encounterPB(e world.Encounter) *relayv1.Encounter {
	out := &relayv1.Encounter{
		Id:         e.ID,
		Name:       e.Name,
		Round:      int32(e.Round),
		Turn:       int32(e.Turn),
		Current:    e.Current,
		Combatants: make([]*relayv1.Combatant, 0, len(e.Combatants)),
	}
	for _, c := range e.Combatants {
		pc := &relayv1.Combatant{
			Id:        c.ID,
			Name:      c.Name,
			TokenUuid: c.TokenUUID,
			ActorUuid: c.ActorUUID,
			Img:       c.Img,
			Hidden:    c.Hidden,
			Defeated:  c.Defeated,
		}
		if c.Initiative != nil {
			pc.Initiative = wrapperspb.Double(*c.Initiative)
		}
		out.Combatants = append(out.Combatants, pc)
	}
	return out
}

// failedPB converts the uuids an add or remove could not handle.
func failedPB(failed []world.FailedUUID) []*relayv1.FailedUuid {
	out := make([]*relayv1.FailedUuid, 0, len(failed))
	for _, f := range failed {
		out = append(out, &relayv1.FailedUuid{Uuid: f.UUID, Reason: f.Reason})
	}
	return out
}
