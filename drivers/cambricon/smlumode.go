package cambricon

import (
	"context"
	"fmt"
)

// setSMLUModeLocked switches a card's sMLU mode and reads it back, as the
// NVIDIA backend reads MIG mode back after switching it. cnmon's zero
// exit is not taken for proof: its success message is not public, and a
// switch can be reported and not made (NVML reports a MIG switch it
// leaves pending so). A card that does not read back in the mode asked
// for fails naming both modes; the caller's rollback (switchOffIdle)
// then switches back what did take effect.
func (b *Backend) setSMLUModeLocked(ctx context.Context, card int, on bool) error {
	if err := b.cfg.Tool.SetSMLUMode(ctx, card, on); err != nil {
		return fmt.Errorf("MLU %d: switch sMLU mode %s: %w", card, smluModeName(on), err)
	}
	info, err := b.cfg.Tool.SMLUInfo(ctx, card)
	if err != nil {
		return fmt.Errorf("MLU %d: read sMLU mode back after switching it %s: %w", card, smluModeName(on), err)
	}
	if info.Enabled != on {
		return fmt.Errorf("MLU %d: sMLU mode is %s after cnmon reported switching it %s: the switch did not take effect",
			card, smluModeName(info.Enabled), smluModeName(on))
	}
	return nil
}

// smluModeName is a mode as cnmon set names it.
func smluModeName(on bool) string {
	if on {
		return "on"
	}
	return "off"
}
