package cambricon

import "fmt"

// assignMLULinkGroups gives each card the ids of the MLU-Link groups it
// belongs to, published as accelerator.strata.sh/partition<size>, so a
// claim for N cards of one group uses matchAttribute on partition<N>.
//
// MLU370-X8: cnmon lists the two chips of a board as consecutive cards,
// linked on the board (partition2: the board); MLU-Link bridges join four
// boards, so the sixteen cards of an eight-board server form two groups
// of eight, cards 0-7 and 8-15, as Cambricon's device plugin splits them
// (partition8). Other models get no groups: the plugin does not guess a
// topology it does not know.
func assignMLULinkGroups(cards []*card) {
	for _, c := range cards {
		c.groups = map[int]string{}
		if c.Name == "MLU370-X8" {
			c.groups[2] = fmt.Sprintf("board-%d", c.Index/2)
			c.groups[8] = fmt.Sprintf("mlulink-%d", c.Index/8)
		}
	}
}
